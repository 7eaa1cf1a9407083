//! Pages of a run's log: its stdout and stderr tail files read from a cursor.

use std::io::ErrorKind;
use std::path::Path;

use taskgate_engine::{EngineError, LogLine, LogPage, MAX_PAGE_BYTES};

use super::*;
use crate::layout::{self, EXIT, STDERR_TAIL, STDOUT_TAIL};
use crate::translate::{split_lines, LogCursor};

/// What one read of a tail file found.
#[derive(Debug, Default)]
pub(super) struct StreamRead {
    /// The stream offset of the first byte the file keeps.
    start: u64,
    /// The bytes from the cursor (or from `start`, if the cursor is older).
    chunk: Vec<u8>,
    /// True when `chunk` reaches the end of the file.
    to_end: bool,
}

/// Reads at most `max` bytes of a tail file from stream offset `from`: its
/// header, one seek, one read. A missing file is an empty stream.
pub(super) fn read_stream(path: &Path, from: u64, max: usize) -> Result<StreamRead, EngineError> {
    use std::io::{Read, Seek, SeekFrom};
    let fail = |e| map_error(Action::Spool("cannot read the run's output"), e);
    let mut file = match layout::open_plain(path) {
        Ok((file, _)) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if from > 0 {
                return Err(beyond());
            }
            return Ok(StreamRead {
                to_end: true,
                ..StreamRead::default()
            });
        }
        Err(e) => return Err(fail(e)),
    };
    let size = file.metadata().map_err(fail)?.len();
    let mut head = Vec::with_capacity(layout::MAX_TAIL_HEADER + 8);
    (&mut file)
        .take(layout::MAX_TAIL_HEADER as u64 + 8)
        .read_to_end(&mut head)
        .map_err(fail)?;
    let (start, header) = layout::tail_header(&head);
    let kept = size - header as u64;
    let from = from.max(start);
    if from > start + kept {
        return Err(beyond());
    }
    file.seek(SeekFrom::Start(header as u64 + (from - start)))
        .map_err(fail)?;
    let mut chunk = Vec::with_capacity(max.min(64 * 1024));
    file.take(max as u64)
        .read_to_end(&mut chunk)
        .map_err(fail)?;
    let to_end = from + chunk.len() as u64 >= start + kept;
    Ok(StreamRead {
        start,
        chunk,
        to_end,
    })
}

/// A cursor past the end of what the run printed: not one of this run's.
pub(super) fn beyond() -> EngineError {
    EngineError::InvalidInput {
        message: "the log cursor is beyond this run's output".to_owned(),
    }
}

impl Spool {
    /// Reads up to `limit` lines of the run's output from `cursor`: standard
    /// output first, then standard error (each in order; the two are not
    /// interleaved, the spool keeps no times). At most [`MAX_PAGE_BYTES`] are
    /// read, half from each stream.
    pub(crate) fn logs(
        &self,
        name: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let mut at = cursor
            .map(LogCursor::parse)
            .transpose()?
            .unwrap_or_default();
        let dir = self.run_dir(name)?;
        if read_meta(&dir)?.is_none() {
            return Err(EngineError::NotFound);
        }
        // Looked at before the tails: once the exit is recorded the tails are
        // final, so what is read after it is everything.
        let ended = dir.join(EXIT).exists();
        let mut lines = Vec::new();
        let mut complete = ended;
        for (file, source) in [(STDOUT_TAIL, "stdout"), (STDERR_TAIL, "stderr")] {
            let offset = match source {
                "stdout" => &mut at.stdout,
                _ => &mut at.stderr,
            };
            let left = limit.saturating_sub(lines.len());
            let read = read_stream(&dir.join(file), *offset, MAX_PAGE_BYTES / 2)?;
            if read.start > *offset {
                let lost = read.start - *offset;
                lines.push(LogLine::note(&format!(
                    "{lost} bytes of {source} are no longer kept (the engine's tail_bytes)"
                )));
                *offset = read.start;
            }
            let full = read.chunk.len() >= MAX_PAGE_BYTES / 2;
            let (mut taken, used) =
                split_lines(&read.chunk, source, left, ended && read.to_end, full);
            lines.append(&mut taken);
            *offset += used as u64;
            complete &= read.to_end && used == read.chunk.len();
        }
        Ok(LogPage {
            lines,
            cursor: at.encode(),
            complete,
        })
    }
}
