//! One block that a read of small files reads them into: a run folder's
//! records and `/proc` stat lines.

use std::fs::File;
use std::io::{ErrorKind, Read};

/// The largest record taskgate reads whole (`meta.json`, `pid.json`,
/// `exit.json`, an input request): its own are a few hundred bytes, and a
/// larger one (left by a process) is refused without being read.
pub(crate) const MAX_RECORD_BYTES: u64 = 1 << 20;

/// The most a record or a `/proc` stat line is expected to take; a larger file
/// is still read whole, with more reads.
const RECORD_BYTES: usize = 2048;

/// Where one read's files are read into: a block zeroed once, and room for a
/// file larger than it.
pub(crate) struct Buffer {
    block: Vec<u8>,
    larger: Vec<u8>,
}

impl Buffer {
    pub(crate) fn new() -> Self {
        Self {
            block: vec![0; RECORD_BYTES],
            larger: Vec::new(),
        }
    }

    /// The room for a file larger than the block, emptied.
    pub(crate) fn larger(&mut self) -> &mut Vec<u8> {
        self.larger.clear();
        &mut self.larger
    }
}

/// Reads `file` whole into `buffer`. A record is written whole and renamed
/// into place, and the kernel writes a `/proc` stat line whole, so a read
/// that returns less than the block has it all: one `read`, and no second
/// one to see the end. A file that fills the block is read on to its end, up
/// to [`MAX_RECORD_BYTES`]: a larger one is `InvalidData`, and not read on.
pub(crate) fn read_whole(mut file: File, buffer: &mut Buffer) -> std::io::Result<&[u8]> {
    let n = loop {
        match file.read(&mut buffer.block) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if n < buffer.block.len() {
        return Ok(&buffer.block[..n]);
    }
    buffer.larger.clear();
    buffer.larger.extend_from_slice(&buffer.block);
    file.take(MAX_RECORD_BYTES + 1 - n as u64)
        .read_to_end(&mut buffer.larger)?;
    if buffer.larger.len() as u64 > MAX_RECORD_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("larger than {MAX_RECORD_BYTES} bytes"),
        ));
    }
    Ok(&buffer.larger)
}
