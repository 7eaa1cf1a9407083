//! Airflow's access log, as the tests that count what taskgate asked Airflow read
//! it: the `http.access` lines of the api-server that `scripts/airflow/up.sh`
//! started (`$TASKGATE_AIRFLOW_HOME/api-server.log`).
//!
//! The api-server writes a request's line once the request is over, after its
//! answer went out: a client can hold the answer before the line is in the file
//! (seen on a third of plain GETs on an idle machine, by a millisecond or two;
//! more under load). So neither a line's place in the file nor the moment it
//! shows up says when its request was made. What does: the line's time (when
//! it was written) less its `duration_us` (how long since the request came in),
//! [`Access::started`]. A test that asks "what was requested while the server
//! was idle" compares that with its own clock (the same machine's).

use std::time::{Duration, SystemTime};

/// One request in the access log.
#[derive(Debug, Clone)]
pub struct Access {
    /// When the api-server took the request (the line's time less its duration).
    pub started: SystemTime,
    /// When the line was written (the request was over).
    pub written: SystemTime,
    /// `GET`, `POST`, ….
    pub method: String,
    /// The request's path, without its query.
    pub path: String,
    /// The whole line, for failure messages.
    pub line: String,
}

impl Access {
    /// Whether the request was taken in `[from, to)`.
    #[must_use]
    pub fn made_in(&self, from: SystemTime, to: SystemTime) -> bool {
        self.started >= from && self.started < to
    }
}

/// The value of `key=` in an access line (values with spaces are quoted; the
/// fields used here have none).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// Fails the test on an access line [`parse`] cannot read.
fn unreadable<T>(line: &str) -> T {
    panic!("an access line this helper cannot read: {line}")
}

/// Reads one access line; `None` for a line that is not one.
///
/// # Panics
///
/// On an access line without a readable time, duration, method or path: the
/// log's format changed, and a test counting nothing would pass for nothing.
#[must_use]
pub fn parse(line: &str) -> Option<Access> {
    if !line.contains("[http.access]") {
        return None;
    }
    let written = line
        .split_whitespace()
        .next()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .unwrap_or_else(|| unreadable(line));
    let took = field(line, "duration_us")
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or_else(|| unreadable(line));
    let method = field(line, "method").unwrap_or_else(|| unreadable(line));
    let path = field(line, "path").unwrap_or_else(|| unreadable(line));
    Some(Access {
        started: written - Duration::from_micros(took),
        written,
        method: method.to_owned(),
        path: path.to_owned(),
        line: line.to_owned(),
    })
}

/// The requests for DAG `dag` (the path `/api/v2/dags/{dag}` and those under
/// it) in the access log so far, in the order their lines were written.
///
/// # Panics
///
/// Without `TASKGATE_AIRFLOW_HOME`; on an access line [`parse`] cannot read.
#[must_use]
pub fn requests_for(dag: &str) -> Vec<Access> {
    let home = std::env::var("TASKGATE_AIRFLOW_HOME")
        .expect("TASKGATE_AIRFLOW_HOME (scripts/airflow/up.sh prints it)");
    let log = std::fs::read_to_string(format!("{home}/api-server.log")).unwrap_or_default();
    let dag_path = format!("/api/v2/dags/{dag}");
    let under = format!("{dag_path}/");
    log.lines()
        .filter_map(parse)
        .filter(|a| a.path == dag_path || a.path.starts_with(&under))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_its_start_method_and_path() {
        let line = "2026-12-07T13:44:13.254918Z [info     ] request finished               [http.access] client_addr=127.0.0.1:45926 duration_us=61605 loc=http_access_log.py:130 method=GET path=/api/v2/dags/tg_idle/dagRuns/tg-x/taskInstances query='limit=100' status_code=200";
        let a = parse(line).unwrap();
        assert_eq!(a.method, "GET");
        assert_eq!(a.path, "/api/v2/dags/tg_idle/dagRuns/tg-x/taskInstances");
        assert_eq!(
            a.started,
            humantime::parse_rfc3339("2026-12-07T13:44:13.193313Z").unwrap()
        );
        assert_eq!(
            a.written,
            humantime::parse_rfc3339("2026-12-07T13:44:13.254918Z").unwrap()
        );
        assert!(parse("2026-12-07T13:44:13Z [info] scheduler heartbeat").is_none());
    }
}
