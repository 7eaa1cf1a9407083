//! One read of a run folder, with as few system calls as the files allow.
//!
//! A poll reads about ten entries of the run's folder. Each is opened relative
//! to one descriptor of the folder (`openat`), so the kernel walks the spool's
//! path once per read instead of once per file; the records are read into one
//! buffer, with one `read` each when they fit; the folder's own times come from
//! its descriptor. Nothing outlives the read: the descriptors close with it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, FileStat, Mode};

use taskgate_engine::InputRequest;

use crate::buffer::{read_whole, Buffer};
use crate::layout::{self, REQUEST_SUFFIX, RESPONSE_SUFFIX};

/// An open run folder.
pub(crate) struct RunFolder {
    dir: OwnedFd,
    buffer: Buffer,
}

impl RunFolder {
    /// Opens the folder `dir`; `Ok(None)` when it is not there (never made, or
    /// removed after its retention, perhaps by another replica).
    ///
    /// # Errors
    ///
    /// The system's error for a folder that exists but cannot be opened.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Option<Self>> {
        match fcntl::open(dir, directory_flags(), Mode::empty()) {
            Ok(dir) => Ok(Some(Self {
                dir,
                buffer: Buffer::new(),
            })),
            Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The folder's mtime.
    pub(crate) fn modified(&self) -> Option<SystemTime> {
        stat::fstat(&self.dir).ok().and_then(|s| mtime(&s))
    }

    /// The mtime of the entry `name`, when it exists.
    pub(crate) fn modified_at(&self, name: &str) -> Option<SystemTime> {
        stat::fstatat(&self.dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .ok()
            .and_then(|s| mtime(&s))
    }

    /// Parses the record `name` (written whole, by rename); `Ok(None)` when it
    /// is not there.
    ///
    /// # Errors
    ///
    /// The system's error for a file that cannot be read, `InvalidData` for
    /// one that does not parse.
    pub(crate) fn record<T: serde::de::DeserializeOwned>(
        &mut self,
        name: &str,
    ) -> std::io::Result<Option<T>> {
        let Some(file) = open_in(&self.dir, name)? else {
            return Ok(None);
        };
        let bytes = read_whole(file, &mut self.buffer)?;
        parse_record(bytes).map(Some)
    }

    /// [`Self::record`], and whether a supervisor holds it ([`crate::hold`]),
    /// asked through the descriptor the record is read through.
    ///
    /// # Errors
    ///
    /// As [`Self::record`].
    pub(crate) fn held_record<T: serde::de::DeserializeOwned>(
        &mut self,
        name: &str,
    ) -> std::io::Result<Option<(T, bool)>> {
        let Some(file) = open_in(&self.dir, name)? else {
            return Ok(None);
        };
        let held = crate::hold::is_held(&file);
        let bytes = read_whole(file, &mut self.buffer)?;
        parse_record(bytes).map(|record| Some((record, held)))
    }

    /// The file `name`, read whole when it holds at most `max` bytes;
    /// `Ok(None)` when it is not there.
    ///
    /// # Errors
    ///
    /// [`TooLarge`] (as the error's inner value) when it holds more than
    /// `max` bytes: nothing of it is read. The system's error, or
    /// `InvalidData` for anything but a regular file with one link.
    pub(crate) fn capped(&mut self, name: &str, max: u64) -> std::io::Result<Option<Vec<u8>>> {
        let Some(file) = open_in(&self.dir, name)? else {
            return Ok(None);
        };
        let size = layout::plain_size(&file)?;
        if size > max {
            return Err(std::io::Error::other(TooLarge { size, max }));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(max).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// The text of the entry `name` (at most `limit` bytes) and its mtime;
    /// `None` when it is not there or cannot be read.
    pub(crate) fn text(&mut self, name: &str, limit: u64) -> Option<(&[u8], Option<SystemTime>)> {
        let file = open_in(&self.dir, name).ok()??;
        let at = stat::fstat(&file)
            .ok()
            .filter(|s| s.st_mode & libc_type_mask() == libc_regular() && s.st_nlink == 1)?;
        let at = mtime(&at);
        let larger = self.buffer.larger();
        file.take(limit).read_to_end(larger).ok()?;
        Some((larger, at))
    }

    /// The start time of the live process `pid` (`/proc`), read into this
    /// read's buffer.
    pub(crate) fn start_time(&mut self, pid: i32) -> Option<u64> {
        crate::proc::start_time_with(pid, &mut self.buffer)
    }

    /// The folder `name` (inside this run folder, at `path`): its mtime and its
    /// requests without a response, by key. A request that does not parse
    /// (still being written without a rename) is not there yet. A missing
    /// folder has none.
    ///
    /// A folder whose mtime is still [`layout::UNWRITTEN`] never had an entry:
    /// it is not listed, and its mtime is no change. Otherwise the listing
    /// goes by path (`std::fs::read_dir`: open, list, close): a directory
    /// stream on a descriptor costs four more system calls.
    pub(crate) fn requests(
        &mut self,
        path: &Path,
        name: &str,
    ) -> (Option<SystemTime>, BTreeMap<String, InputRequest>) {
        let mut requests = BTreeMap::new();
        let at = self.modified_at(name);
        if at.is_none_or(|at| at == layout::UNWRITTEN) {
            return (None, requests);
        }
        let input = path.join(name);
        let Ok(entries) = std::fs::read_dir(&input) else {
            return (at, requests);
        };
        let keys: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let file = entry.file_name();
                let key = file.to_str()?.strip_suffix(REQUEST_SUFFIX)?;
                layout::valid_input_key(key).then(|| key.to_owned())
            })
            .collect();
        if keys.is_empty() {
            return (at, requests);
        }
        let Ok(input) = fcntl::open(&input, directory_flags(), Mode::empty()) else {
            return (at, requests);
        };
        for key in keys {
            let answered = stat::fstatat(
                &input,
                format!("{key}{RESPONSE_SUFFIX}").as_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .is_ok();
            if answered {
                continue;
            }
            let Ok(Some(file)) = open_in(&input, &format!("{key}{REQUEST_SUFFIX}")) else {
                continue;
            };
            let Ok(bytes) = read_whole(file, &mut self.buffer) else {
                continue;
            };
            if let Ok(request) = serde_json::from_slice::<InputRequest>(bytes) {
                requests.insert(key, request);
            }
        }
        (at, requests)
    }
}

/// A file larger than the cap it is read with.
#[derive(Debug)]
pub(crate) struct TooLarge {
    /// Its size in bytes.
    pub size: u64,
    /// The cap.
    pub max: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes, more than the cap of {}", self.size, self.max)
    }
}

impl std::error::Error for TooLarge {}

/// A record's JSON, its UTF-8 checked once as a whole (`from_slice` would
/// check each string as it reads it).
fn parse_record<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> std::io::Result<T> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
    serde_json::from_str(text).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

fn directory_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// Opens the file `name` of the folder `dir`; `Ok(None)` when it is not there
/// (or the folder went away under us). Never through a symbolic link, never
/// waiting on a FIFO (`O_NOFOLLOW`, `O_NONBLOCK`: a process may have put
/// either in a record's place). [`RunFolder::capped`] and the status read
/// also check that it is a regular file with one link; a record is read with
/// the cap [`crate::buffer::MAX_RECORD_BYTES`] and must parse.
fn open_in(dir: impl AsFd, name: &str) -> std::io::Result<Option<File>> {
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
    match fcntl::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn libc_type_mask() -> nix::libc::mode_t {
    nix::libc::S_IFMT
}

fn libc_regular() -> nix::libc::mode_t {
    nix::libc::S_IFREG
}

fn mtime(stat: &FileStat) -> Option<SystemTime> {
    let secs = u64::try_from(stat.st_mtime).ok()?;
    let nanos = u32::try_from(stat.st_mtime_nsec).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}
