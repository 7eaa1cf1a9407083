//! One file-system watch for every run folder a waiting request looks at.
//!
//! [`Pipeline::wait_for_change`](taskgate_engine::Pipeline::wait_for_change)
//! learns of a run's changes from file-system notification (inotify on Linux).
//! A watcher of the `notify` crate is one inotify instance and one thread, and
//! Linux allows a user 128 instances (`fs.inotify.max_user_instances`) in all:
//! one watcher per waiting run would run out near a hundred listened runs (the
//! rest looked every 100 ms) and cost a thread each. So an engine has one
//! watcher, made on first use, and each folder is watched in it while at least
//! one wait holds a [`Notice`] of it; the last one dropped removes the folder's
//! watch. Each folder costs one inotify watch per directory in it
//! (`fs.inotify.max_user_watches`).
//!
//! Only changes wake a wait: creating, writing, renaming, removing and
//! attribute changes. Opening and reading a file do not, so a wait's own reads
//! of the run's files never wake it again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::Watcher as _;
use tokio::sync::watch;

/// The folder watches of one engine.
#[derive(Debug, Default, Clone)]
pub(crate) struct Folders {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The one watcher, made on first use. Held while a folder's watch is
    /// added or removed, so those never interleave; never taken by the event
    /// handler (the watcher's thread), which takes only `folders`.
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
    /// The watched folders: how many notices each has, and the counter its
    /// events raise.
    folders: Mutex<HashMap<PathBuf, Entry>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let folders = self
            .folders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Folders")
            .field("watched", &folders)
            .finish()
    }
}

struct Entry {
    notices: usize,
    changes: watch::Sender<u64>,
}

/// A watch of one folder, held by one wait: [`Notice::changed`] resolves on
/// the next change in the folder. Dropping the last notice of a folder
/// removes its watch.
pub(crate) struct Notice {
    shared: Arc<Shared>,
    folder: PathBuf,
    changes: watch::Receiver<u64>,
}

impl Folders {
    /// Folders watched right now.
    #[cfg(test)]
    fn watched(&self) -> usize {
        lock(&self.shared.folders).len()
    }

    /// Watches `folder` and everything in it until the notice is dropped.
    ///
    /// # Errors
    ///
    /// When the watcher cannot be made (no inotify, its instances used up) or
    /// the folder cannot be watched (gone, `max_user_watches` reached).
    pub(crate) fn watch(&self, folder: &Path) -> notify::Result<Notice> {
        let mut watcher = lock(&self.shared.watcher);
        if let Some(entry) = lock(&self.shared.folders).get_mut(folder) {
            entry.notices += 1;
            return Ok(self.notice(folder, entry.changes.subscribe()));
        }
        if watcher.is_none() {
            let folders = Arc::downgrade(&self.shared);
            *watcher = Some(notify::recommended_watcher(
                move |event: notify::Result<notify::Event>| {
                    if let Some(shared) = folders.upgrade() {
                        shared.dispatch(event);
                    }
                },
            )?);
        }
        if let Some(w) = watcher.as_mut() {
            w.watch(folder, notify::RecursiveMode::Recursive)?;
        }
        let (changes, rx) = watch::channel(0);
        lock(&self.shared.folders).insert(
            folder.to_owned(),
            Entry {
                notices: 1,
                changes,
            },
        );
        Ok(self.notice(folder, rx))
    }

    fn notice(&self, folder: &Path, changes: watch::Receiver<u64>) -> Notice {
        Notice {
            shared: Arc::clone(&self.shared),
            folder: folder.to_owned(),
            changes,
        }
    }
}

impl Shared {
    /// Raises the counter of the watched folder an event happened in; an
    /// error, or a lost event (the kernel's queue overflowed), raises every
    /// folder's, so no wait misses a change.
    fn dispatch(&self, event: notify::Result<notify::Event>) {
        let folders = lock(&self.folders);
        let bump = |entry: &Entry| entry.changes.send_modify(|n| *n = n.wrapping_add(1));
        let event = match event {
            Ok(event) if !event.need_rescan() => event,
            _ => {
                folders.values().for_each(bump);
                return;
            }
        };
        if !is_change(event.kind) {
            return;
        }
        for path in &event.paths {
            if let Some(entry) = path.ancestors().find_map(|a| folders.get(a)) {
                bump(entry);
            }
        }
    }
}

/// Whether an event kind is a change (not an open or a read).
fn is_change(kind: EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Access(
            AccessKind::Open(_)
                | AccessKind::Read
                | AccessKind::Close(AccessMode::Read | AccessMode::Execute)
        )
    )
}

impl Notice {
    /// Resolves on the next change in the folder since the last call (or
    /// since the notice was made).
    ///
    /// # Errors
    ///
    /// Never while the notice is held; the error is the channel's.
    pub(crate) async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.changes.changed().await
    }
}

impl Drop for Notice {
    fn drop(&mut self) {
        let mut watcher = lock(&self.shared.watcher);
        let last = {
            let mut folders = lock(&self.shared.folders);
            match folders.get_mut(&self.folder) {
                Some(entry) if entry.notices > 1 => {
                    entry.notices -= 1;
                    false
                }
                Some(_) => {
                    folders.remove(&self.folder);
                    true
                }
                None => false,
            }
        };
        if last {
            if let Some(w) = watcher.as_mut() {
                // A removed folder's watch is gone already.
                let _ = w.unwatch(&self.folder);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_watch_per_folder_shared_and_gone_with_the_last_notice() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let folders = Folders::default();
        let mut first = folders.watch(&a).unwrap();
        let mut second = folders.watch(&a).unwrap();
        let mut other = folders.watch(&b).unwrap();
        assert_eq!(folders.watched(), 2);

        // Reading a file is not a change; writing one is, for both notices
        // of its folder and not for the other folder's.
        std::fs::write(a.join("f"), b"x").unwrap();
        let wait = Duration::from_secs(10);
        tokio::time::timeout(wait, first.changed())
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(wait, second.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(
            !other.changes.has_changed().unwrap(),
            "a write in a is not a change of b"
        );

        drop(first);
        assert_eq!(folders.watched(), 2, "a's second notice keeps its watch");
        drop(second);
        assert_eq!(folders.watched(), 1);
        std::fs::write(b.join("g"), b"y").unwrap();
        tokio::time::timeout(wait, other.changed())
            .await
            .unwrap()
            .unwrap();
        drop(other);
        assert_eq!(folders.watched(), 0);
    }

    #[test]
    fn opens_and_reads_are_not_changes() {
        use notify::event::{CreateKind, ModifyKind};
        assert!(!is_change(EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(is_change(EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(EventKind::Create(CreateKind::File)));
        assert!(is_change(EventKind::Modify(ModifyKind::Any)));
    }
}
