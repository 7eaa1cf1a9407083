//! Reading what a run printed, a page at a time, with a cursor so a client
//! reads only what is new. The engine chooses its own cursor (byte offsets,
//! event ids); the core seals it for the caller and the run, so a client
//! holds an opaque value that opens only for it and only on that run.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use taskgate_engine::{log_limit, spec_hash, EngineError, LogLine, MAX_CURSOR_BYTES};

use super::errors::CoreError;
use super::{Gateway, Tool};
use crate::core::audit::{self, Action, Outcome};
use crate::core::handle::{Purpose, TaskClaims};
use crate::core::metrics::Refusal;

/// One page of a run's log, as the core hands it to dialects.
#[derive(Debug, Clone)]
pub struct LogsRead {
    /// The lines, oldest first.
    pub lines: Vec<LogLine>,
    /// The sealed cursor to read on from.
    pub cursor: String,
    /// True when the run has ended and everything it printed was read.
    pub complete: bool,
}

/// What a sealed log cursor holds: which run it belongs to (a digest, not the
/// native reference) and the engine's own cursor. It is sealed to expire the
/// tool's `keep_alive` after it was issued; an expired one is refused as any
/// other bad cursor.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CursorClaims {
    #[serde(rename = "r")]
    run: String,
    #[serde(rename = "c")]
    engine: String,
}

/// A short digest naming a run of a tool (the cursor is sealed; this only ties
/// it to one run).
fn run_digest(tool: &str, native: &str) -> String {
    spec_hash(format!("{tool}\u{0}{native}").as_bytes())
}

fn bad_cursor() -> CoreError {
    CoreError::InvalidCursor(
        "cursor is invalid: pass back exactly the cursor an earlier taskgate_logs call \
         returned for this task, or none to read from the start"
            .to_owned(),
    )
}

impl Gateway {
    /// Opens a task handle of any dialect for reading its logs: a 2026-07-28
    /// or 2025-11-25 task id, or a `handles` handle. Only the caller it was
    /// issued to opens it. Once open, the current span gets a link to the
    /// span that started the run, when the handle names one.
    ///
    /// # Errors
    ///
    /// [`CoreError::NotFound`], alike for every reason (forged, altered,
    /// foreign, expired, a tool no longer configured).
    pub fn open_for_logs(
        &self,
        caller: &str,
        handle: &str,
    ) -> Result<(TaskClaims, &Tool), CoreError> {
        let refuse = |why: Refusal| {
            self.metrics.refused(why);
            audit::record(
                Action::Read,
                caller,
                None,
                None,
                None,
                Outcome::Refused(why.label()),
            );
            CoreError::NotFound
        };
        let claims: TaskClaims = self
            .keys
            .open(Purpose::Task, caller, handle)
            .ok_or_else(|| refuse(Refusal::Unopenable))?;
        if claims.expired_at(SystemTime::now()) {
            return Err(refuse(Refusal::Expired));
        }
        let tool = self
            .tool(&claims.tool)
            .map_err(|_| refuse(Refusal::UnknownTool))?;
        if let Some(start) = &claims.trace {
            crate::core::trace_link::link_to_start(start);
        }
        audit::record(
            Action::Read,
            caller,
            Some(tool.name()),
            Some(claims.dialect),
            Some(&audit::run_ref(tool.name(), &claims.native)),
            Outcome::Ok,
        );
        Ok((claims, tool))
    }

    /// Reads one page of the logs of run `native` of `tool` for `caller`,
    /// from `cursor` (a sealed cursor an earlier page returned), at most
    /// `limit` lines (default and maximum in `taskgate_engine`). One engine
    /// call.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidCursor`] for a cursor that does not open for this
    /// caller and run (nothing reaches the engine); [`CoreError::NoLogs`] when
    /// the tool's engine keeps none; [`CoreError::NotFound`]; engine errors.
    pub async fn logs(
        &self,
        caller: &str,
        tool: &Tool,
        native: &str,
        cursor: Option<&str>,
        limit: Option<u64>,
    ) -> Result<LogsRead, CoreError> {
        let digest = run_digest(tool.name(), native);
        let engine_cursor = match cursor {
            None => None,
            Some(sealed) => {
                let claims: CursorClaims = self
                    .keys
                    .open_unexpired(Purpose::LogCursor, caller, sealed, SystemTime::now())
                    .filter(|c: &CursorClaims| c.run == digest)
                    .ok_or_else(bad_cursor)?;
                Some(claims.engine)
            }
        };
        if !tool.capabilities.logs {
            return Err(CoreError::NoLogs(tool.name().to_owned()));
        }
        let page = tool
            .pipeline
            .logs(
                &native.to_owned(),
                engine_cursor.as_deref(),
                log_limit(limit),
            )
            .await
            .map_err(|e| match e {
                EngineError::NotFound => CoreError::NotFound,
                EngineError::InvalidInput { .. } if engine_cursor.is_some() => bad_cursor(),
                other => CoreError::Engine(other),
            })?;
        if page.cursor.len() > MAX_CURSOR_BYTES {
            return Err(CoreError::Engine(EngineError::internal(
                "the engine made a log cursor longer than taskgate accepts",
            )));
        }
        // A cursor expires as the tool's tasks do, counted from this page.
        let sealed = self.keys.seal_expiring(
            Purpose::LogCursor,
            caller,
            &CursorClaims {
                run: digest,
                engine: page.cursor,
            },
            tool.config.keep_alive,
        );
        Ok(LogsRead {
            lines: page.lines,
            cursor: sealed,
            complete: page.complete,
        })
    }
}
