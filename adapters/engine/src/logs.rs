//! What a run printed, read a page at a time: [`LogPage`] and [`LogLine`],
//! and the bounds every engine keeps to.
//!
//! A page carries an engine cursor: an opaque string the engine chose (byte
//! offsets, event ids, a count of jobs read) that the server seals before a
//! client sees it and gives back on the next read. Reading from the cursor a
//! page returned yields only what is new since that page.

/// The most lines one page holds, whatever a client asks for.
pub const MAX_LOG_LINES: usize = 1000;
/// The lines a page holds when a client names no limit.
pub const DEFAULT_LOG_LINES: usize = 200;
/// The longest line kept, in bytes; the rest of a longer line is cut off and
/// marked (see [`LogLine::new`]).
pub const MAX_LINE_BYTES: usize = 4096;
/// The most bytes an engine reads upstream for one page (of a file, a log
/// request, a history page); a page may end before `limit` lines because of it.
pub const MAX_PAGE_BYTES: usize = 256 * 1024;
/// The longest engine cursor accepted, in bytes.
pub const MAX_CURSOR_BYTES: usize = 512;

/// What is appended to a line cut at [`MAX_LINE_BYTES`].
const CUT_MARK: &str = " [… line cut]";

/// One line a run printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Where it came from: `stdout` or `stderr` (exec), a pod and container
    /// (Kubernetes), a job or step (GitHub), an event type (Step Functions),
    /// `taskgate` for a note of taskgate's own (lines lost to a bound).
    pub source: String,
    /// The text, without its line end, at most [`MAX_LINE_BYTES`] bytes plus a
    /// cut mark.
    pub text: String,
}

impl LogLine {
    /// A line from `source`, cut at [`MAX_LINE_BYTES`] (on a character
    /// boundary) and without a trailing `\r`.
    #[must_use]
    pub fn new(source: impl Into<String>, text: &str) -> Self {
        let text = text.strip_suffix('\r').unwrap_or(text);
        let text = if text.len() > MAX_LINE_BYTES {
            let mut end = MAX_LINE_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{CUT_MARK}", &text[..end])
        } else {
            text.to_owned()
        };
        Self {
            source: source.into(),
            text,
        }
    }

    /// A note of taskgate's own, such as lines an engine no longer keeps.
    #[must_use]
    pub fn note(text: &str) -> Self {
        Self::new("taskgate", text)
    }
}

/// One page of a run's log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogPage {
    /// The lines, oldest first.
    pub lines: Vec<LogLine>,
    /// Where the next read starts: pass it back to read only what is new.
    pub cursor: String,
    /// True when the run has ended and every line up to its end was read: a
    /// read from [`LogPage::cursor`] would return nothing, now or later.
    pub complete: bool,
}

/// The number of lines a client's `limit` stands for: [`DEFAULT_LOG_LINES`]
/// when it names none, at least one, at most [`MAX_LOG_LINES`].
#[must_use]
pub fn log_limit(requested: Option<u64>) -> usize {
    requested.map_or(DEFAULT_LOG_LINES, |n| {
        usize::try_from(n)
            .unwrap_or(MAX_LOG_LINES)
            .clamp(1, MAX_LOG_LINES)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_on_a_character_boundary() {
        let cases: [(&str, usize, bool); 4] = [
            ("short", 5, false),
            ("crlf\r", 4, false),
            (&"é".repeat(MAX_LINE_BYTES), MAX_LINE_BYTES, true),
            (&"x".repeat(MAX_LINE_BYTES + 1), MAX_LINE_BYTES, true),
        ];
        for (text, kept, cut) in cases {
            let line = LogLine::new("stdout", text);
            assert_eq!(line.text.ends_with(CUT_MARK), cut, "{text:.20}");
            let body = line.text.strip_suffix(CUT_MARK).unwrap_or(&line.text);
            assert_eq!(body.len(), kept);
        }
    }

    #[test]
    fn limits_are_clamped() {
        for (asked, got) in [
            (None, DEFAULT_LOG_LINES),
            (Some(0), 1),
            (Some(5), 5),
            (Some(u64::MAX), MAX_LOG_LINES),
        ] {
            assert_eq!(log_limit(asked), got);
        }
    }
}
