//! Keeping the spool small: the sweep that removes run folders past their
//! retention, and the spool's size for `taskgate check-config`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;
use crate::layout::{self, Meta, META};
use crate::translate::{translate, Translation};

/// How many runs a start looks at for removal.
pub(crate) const SWEEP_AT_START: usize = 16;

/// How many runs the sweep at server start looks at.
pub(crate) const SWEEP_AT_SERVE: usize = 256;

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sweep {
    /// Runs looked at.
    pub examined: usize,
    /// Runs removed (past their retention, nothing alive).
    pub removed: usize,
}

/// The size of a spool.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SpoolSize {
    /// Run folders.
    pub runs: usize,
    /// Bytes of their files.
    pub bytes: u64,
    /// When the oldest run was created.
    pub oldest: Option<SystemTime>,
}

/// Bytes of the files under `dir` (not following links).
pub(super) fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

impl Spool {
    /// Removes the run folders past their retention among at most `limit` of
    /// the spool's runs, starting at a varying place so that successive sweeps
    /// cover all of them. A run whose supervisor or process is alive is never
    /// removed (translation calls it removable only once both are gone), nor a
    /// folder that is not a run. Returns how many runs were looked at and removed.
    pub(crate) fn sweep(&self, limit: usize) -> Sweep {
        let mut names: Vec<String> = match std::fs::read_dir(&self.settings.spool_dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| layout::valid_run_name(n))
                .collect(),
            Err(_) => return Sweep::default(),
        };
        names.sort_unstable();
        let start = if names.is_empty() {
            0
        } else {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as usize);
            nanos % names.len()
        };
        let mut sweep = Sweep::default();
        let now = SystemTime::now();
        for name in names
            .iter()
            .cycle()
            .skip(start)
            .take(limit.min(names.len()))
        {
            let dir = self.settings.spool_dir.join(name);
            sweep.examined += 1;
            let Ok(view) = self.view(&dir) else { continue };
            if let Translation::Gone { removable: true } = translate(&view, now) {
                self.remove(&dir);
                sweep.removed += 1;
            }
        }
        sweep
    }

    /// The spool's size: its runs, their bytes and the oldest one's creation.
    pub(crate) fn size(&self) -> SpoolSize {
        let mut size = SpoolSize::default();
        let Ok(entries) = std::fs::read_dir(&self.settings.spool_dir) else {
            return size;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if !layout::valid_run_name(&name) {
                continue;
            }
            size.runs += 1;
            size.bytes += tree_bytes(&entry.path());
            if let Ok(Some(meta)) = layout::read_json::<Meta>(&entry.path().join(META)) {
                let created = layout::from_ms(meta.created_at_ms);
                size.oldest = Some(size.oldest.map_or(created, |o: SystemTime| o.min(created)));
            }
        }
        size
    }

    /// Moves a run folder out of sight, then deletes it.
    pub(super) fn remove(&self, dir: &Path) {
        let Some(name) = dir.file_name() else { return };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let gone = self
            .settings
            .spool_dir
            .join(STAGING)
            .join(format!("gone.{}.{nanos}", name.to_string_lossy()));
        if std::fs::rename(dir, &gone).is_ok() {
            let _ = std::fs::remove_dir_all(&gone);
            tracing::debug!(run = %name.to_string_lossy(), "exec run removed after its retention");
        }
    }
}
