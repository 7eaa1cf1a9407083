//! The supervisor's hold on a running process's record.
//!
//! While the process it started runs, the supervisor keeps a read lock of its
//! open file description (`F_OFD_SETLK`) on `pid.json`, and lets go once it
//! has reaped the process, before it records the exit. A status read that
//! finds the lock taken (`F_OFD_GETLK`: one system call on the descriptor the
//! record is read through) knows the process runs without opening
//! `/proc/<pid>/stat`, and without doubt about a reused pid: the kernel drops
//! the lock when the supervisor's descriptor goes, however the supervisor
//! ends. A record without the lock (a run started before the lock existed, a
//! file system without these locks, the moment between the record's rename
//! and the lock) is judged by `/proc`, as it always was.

use std::fs::File;
use std::os::fd::AsFd;

/// Takes the hold on the record `file` (opened read-only). The hold lasts
/// until `file` is dropped; it must not be inherited by the process, which
/// `File::open` ensures (close-on-exec).
///
/// # Errors
///
/// The system's error when the lock cannot be taken (the file system does not
/// support it): the run is then judged by `/proc`.
pub(crate) fn take(file: &File) -> std::io::Result<()> {
    imp::take(file.as_fd())
}

/// Whether another open file description holds a lock on `file`: while a
/// supervisor holds `pid.json`, its process runs. `false` when the question
/// cannot be asked.
pub(crate) fn is_held(file: impl AsFd) -> bool {
    imp::is_held(file.as_fd())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::os::fd::BorrowedFd;

    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc;

    /// A lock of `kind` over the whole file.
    fn whole_file(kind: libc::c_int) -> libc::flock {
        libc::flock {
            l_type: kind as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 0,
            // Must be 0 for the OFD commands.
            l_pid: 0,
        }
    }

    pub(super) fn take(file: BorrowedFd<'_>) -> std::io::Result<()> {
        fcntl(file, FcntlArg::F_OFD_SETLK(&whole_file(libc::F_RDLCK)))?;
        Ok(())
    }

    pub(super) fn is_held(file: BorrowedFd<'_>) -> bool {
        // Asks whether a write lock could be placed: any read lock held
        // through another description is in its way and is reported back.
        let mut probe = whole_file(libc::F_WRLCK);
        fcntl(file, FcntlArg::F_OFD_GETLK(&mut probe)).is_ok()
            && probe.l_type != libc::F_UNLCK as libc::c_short
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use std::os::fd::BorrowedFd;

    pub(super) fn take(_: BorrowedFd<'_>) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }

    pub(super) fn is_held(_: BorrowedFd<'_>) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_seen_through_another_descriptor_and_ends_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pid.json");
        std::fs::write(&path, b"{}").unwrap();
        let reader = File::open(&path).unwrap();
        assert!(!is_held(&reader));
        let holder = File::open(&path).unwrap();
        take(&holder).unwrap();
        assert!(is_held(&reader));
        // A new descriptor, as each status read opens, sees it too.
        assert!(is_held(File::open(&path).unwrap()));
        drop(holder);
        assert!(!is_held(&reader));
    }
}
