//! Values kept for exact statistics without holding them in memory during the run: they
//! are appended in chunks to a temporary file whose name is removed as soon as it is
//! opened (nothing is left behind, even when the process is killed), and read back when
//! the run's statistics are computed, or when the run leaves the exact budget and its
//! samples' histograms are built from them (D81). So a run inside D23's exact budget costs disk
//! (bounded by the budget: at most ~100 MB), not memory that grows with its length: the
//! process's RSS stays flat from the first seconds of a long run to its end.
//!
//! When no temporary file can be had, values stay in memory (as before this existed).

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt;

/// Values held in memory before a chunk goes to the file.
const CHUNK: usize = 16 * 1024;
/// The chunk of a small sequence (one of a breakdown's many): 16 KB of f64.
pub const SMALL_CHUNK: usize = 2 * 1024;

/// A value stored as fixed-size little-endian bytes.
pub trait Record: Copy {
    const SIZE: usize;
    fn put(&self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}

fn f64_at(b: &[u8], at: usize) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    f64::from_le_bytes(a)
}

impl Record for f64 {
    const SIZE: usize = 8;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64_at(b, 0)
    }
}

impl Record for (f64, f64) {
    const SIZE: usize = 16;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
        out.extend_from_slice(&self.1.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        (f64_at(b, 0), f64_at(b, 8))
    }
}

/// A new temporary file, already unlinked, named `surge-PREFIX-PID-SEQ` while it had a name.
pub fn unlinked_temp(prefix: &str) -> std::io::Result<(File, std::path::PathBuf)> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("surge-{prefix}-{}-{seq}.bin", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok((file, path))
}

/// An append-only sequence of values, in order, on disk until [`Spilled::load`].
#[derive(Debug)]
pub struct Spilled<T: Record> {
    /// Values not written to the file yet (all of them once loaded).
    mem: Vec<T>,
    /// How many values wait in memory before they are written.
    chunk: usize,
    /// The first `on_disk` values, when some were written.
    file: Option<File>,
    on_disk: usize,
    /// No file could be written: values stay in memory.
    in_memory: bool,
    /// Values on disk could not be read back (load then fails).
    lost: bool,
}

impl<T: Record> Default for Spilled<T> {
    fn default() -> Self {
        Self { mem: Vec::new(), chunk: CHUNK, file: None, on_disk: 0, in_memory: false, lost: false }
    }
}

impl<T: Record> Clone for Spilled<T> {
    /// A copy held in memory (what is on disk is read back for it).
    fn clone(&self) -> Self {
        match self.read_disk() {
            Ok(mut all) => {
                all.extend_from_slice(&self.mem);
                Self { mem: all, in_memory: true, ..Self::default() }
            }
            Err(_) => Self { lost: true, in_memory: true, ..Self::default() },
        }
    }
}

/// The stored values could not be read back from the temporary file.
#[derive(Debug, thiserror::Error)]
#[error("reading back kept samples: {0}")]
pub struct Lost(#[source] pub std::io::Error);

impl<T: Record> Spilled<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A sequence that writes every `chunk` values (less memory, more writes).
    pub fn with_chunk(chunk: usize) -> Self {
        Self { chunk: chunk.max(1), ..Self::default() }
    }

    pub fn len(&self) -> usize {
        self.on_disk + self.mem.len()
    }

    /// How many values are in the file.
    #[cfg(test)]
    pub(crate) fn on_disk(&self) -> usize {
        self.on_disk
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, v: T) {
        self.mem.push(v);
        if self.mem.len() >= self.chunk && !self.in_memory {
            self.flush();
        }
    }

    /// Writes the values held in memory to the file (creating it the first time).
    fn flush(&mut self) {
        if self.file.is_none() {
            match unlinked_temp("samples") {
                Ok((f, _)) => self.file = Some(f),
                Err(_) => {
                    self.in_memory = true;
                    return;
                }
            }
        }
        let mut bytes = Vec::with_capacity(self.mem.len() * T::SIZE);
        for v in &self.mem {
            v.put(&mut bytes);
        }
        let Some(f) = self.file.as_mut() else { return };
        // The file's position is its end: every write appends a whole chunk or fails.
        if f.write_all(&bytes).is_err() {
            // What was written before stays valid; from now on values stay in memory.
            let _ = f.set_len((self.on_disk * T::SIZE) as u64);
            self.in_memory = true;
            return;
        }
        self.on_disk += self.mem.len();
        self.mem.clear();
    }

    fn read_disk(&self) -> std::io::Result<Vec<T>> {
        if self.lost {
            return Err(std::io::Error::other("kept samples were lost"));
        }
        let Some(f) = &self.file else { return Ok(Vec::new()) };
        let mut bytes = vec![0u8; self.on_disk * T::SIZE];
        f.read_exact_at(&mut bytes, 0)?;
        Ok(bytes.chunks_exact(T::SIZE).map(T::get).collect())
    }

    /// Every value in the order pushed, read back a chunk at a time (memory: one chunk,
    /// whatever the count), without loading them.
    pub fn for_each(&self, mut f: impl FnMut(T)) -> Result<(), Lost> {
        if self.lost {
            return Err(Lost(std::io::Error::other("kept samples were lost")));
        }
        if let Some(file) = &self.file {
            let mut bytes = vec![0u8; self.chunk.min(self.on_disk).max(1) * T::SIZE];
            let mut done = 0;
            while done < self.on_disk {
                let n = (self.on_disk - done).min(bytes.len() / T::SIZE);
                let part = &mut bytes[..n * T::SIZE];
                file.read_exact_at(part, (done * T::SIZE) as u64).map_err(Lost)?;
                part.chunks_exact(T::SIZE).map(T::get).for_each(&mut f);
                done += n;
            }
        }
        self.mem.iter().copied().for_each(f);
        Ok(())
    }

    /// Brings every value into memory (once; the file is closed). After it,
    /// [`Spilled::values`] holds them all, in the order they were pushed.
    pub fn load(&mut self) -> Result<(), Lost> {
        if self.file.is_none() && !self.lost {
            self.in_memory = true;
            return Ok(());
        }
        // One allocation of the final size, filled a chunk read at a time.
        let mut all = Vec::with_capacity(self.on_disk + self.mem.len());
        self.for_each(|v| all.push(v))?;
        self.mem = all;
        (self.file, self.on_disk, self.in_memory) = (None, 0, true);
        Ok(())
    }

    /// The values in memory: all of them after [`Spilled::load`].
    pub fn values(&self) -> &[T] {
        debug_assert!(self.file.is_none(), "load() before reading the values");
        &self.mem
    }

    pub fn values_mut(&mut self) -> &mut [T] {
        debug_assert!(self.file.is_none(), "load() before reading the values");
        &mut self.mem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_in_order_bit_for_bit_across_chunks() {
        let mut s: Spilled<f64> = Spilled::new();
        let n = CHUNK * 3 + 17;
        let want: Vec<f64> = (0..n).map(|i| (i as f64).sqrt() / 7.0 + f64::EPSILON * i as f64).collect();
        for &v in &want {
            s.push(v);
        }
        assert!(s.file.is_some() && s.on_disk == CHUNK * 3, "chunks went to the file");
        assert!(s.mem.len() < CHUNK, "memory holds less than a chunk before load");
        let copy = s.clone();
        let mut streamed = Vec::with_capacity(n);
        s.for_each(|v| streamed.push(v)).expect("read back chunk by chunk");
        assert!(streamed.len() == n && streamed.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
        s.load().expect("load");
        assert_eq!(s.values().len(), n);
        assert!(s.values().iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(copy.values().iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
        s.push(1.5);
        assert_eq!(s.values().last(), Some(&1.5), "pushes after load stay in memory");
    }

    #[test]
    fn pairs_round_trip() {
        let mut a: Spilled<(f64, f64)> = Spilled::new();
        for i in 0..CHUNK + 5 {
            a.push((i as f64, -(i as f64)));
        }
        a.load().expect("load");
        assert_eq!(a.values()[7], (7.0, -7.0));
        assert_eq!(a.values()[CHUNK + 3], ((CHUNK + 3) as f64, -((CHUNK + 3) as f64)));
        assert_eq!(a.len(), CHUNK + 5);
    }
}
