//! Writing an output file so that it is never seen half-written: bytes go to a temporary file in
//! the target's directory (buffered), which is flushed, fsynced, renamed over the target, and the
//! directory fsynced so the rename survives a crash. A temporary that is dropped without
//! [`AtomicFile::commit`] is removed, and every live temporary is listed in a registry so that an
//! interrupt handler (installed by the CLI: SIGINT, SIGTERM) can remove them with [`remove_live`]
//! before the process exits. One writer for every output: reports, plots, calibrations, sweeps.

use crate::error::{Error, Result};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Temporary files not yet renamed into place (removed by [`remove_live`] on an interrupt).
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn register(p: &Path) {
    if let Ok(mut live) = LIVE.lock() {
        live.push(p.to_path_buf());
    }
}

fn unregister(p: &Path) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|q| q != p);
    }
}

/// Removes every temporary file still being written. For interrupt handlers: it takes the lock
/// without waiting forever (a writer holding it only pushes or removes one path).
pub fn remove_live() {
    remove_matching(|_| true)
}

fn remove_matching(keep_out: impl Fn(&Path) -> bool) {
    let paths = match LIVE.try_lock() {
        Ok(mut live) => take_matching(&mut live, &keep_out),
        Err(std::sync::TryLockError::Poisoned(p)) => take_matching(&mut p.into_inner(), &keep_out),
        Err(std::sync::TryLockError::WouldBlock) => {
            std::thread::sleep(std::time::Duration::from_millis(20));
            match LIVE.try_lock() {
                Ok(mut live) => take_matching(&mut live, &keep_out),
                Err(_) => return,
            }
        }
    };
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

fn take_matching(live: &mut Vec<PathBuf>, matches: &impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let (taken, kept): (Vec<PathBuf>, Vec<PathBuf>) = live.drain(..).partition(|p| matches(p));
    *live = kept;
    taken
}

/// A buffered writer to a temporary file that becomes `target` on [`AtomicFile::commit`].
pub struct AtomicFile {
    target: PathBuf,
    tmp_path: PathBuf,
    writer: Option<BufWriter<tempfile::NamedTempFile>>,
}

impl AtomicFile {
    /// Starts writing `target`: creates the temporary next to it.
    pub fn create(target: &Path) -> Result<Self> {
        let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(target, e))?;
        let tmp_path = tmp.path().to_path_buf();
        register(&tmp_path);
        Ok(AtomicFile { target: target.to_path_buf(), tmp_path, writer: Some(BufWriter::with_capacity(1 << 16, tmp)) })
    }

    /// Flushes, fsyncs, renames into place and fsyncs the directory.
    pub fn commit(mut self) -> Result<()> {
        let target = self.target.clone();
        let io = |e: std::io::Error| Error::io(&target, e);
        let writer = self.writer.take().expect("committed once");
        let tmp = writer.into_inner().map_err(|e| io(e.into_error()))?;
        tmp.as_file().sync_all().map_err(io)?;
        // Temporary files are created private; an output should be readable like any other file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(io)?;
        }
        tmp.persist(&self.target).map_err(|e| io(e.error))?;
        unregister(&self.tmp_path);
        #[cfg(unix)]
        {
            let dir = self.target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer.as_mut().expect("not committed").write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.as_mut().expect("not committed").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed: the NamedTempFile removes itself when dropped; forget it here too.
        if self.writer.take().is_some() {
            unregister(&self.tmp_path);
        }
    }
}

/// Writes `target` atomically with `write`; on any error the target is untouched and the
/// temporary removed.
pub fn write_atomically(target: &Path, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut file = AtomicFile::create(target)?;
    write(&mut file).map_err(|e| Error::io(target, e))?;
    file.commit()
}

/// For writers that need a path rather than a stream (a PNG encoder picking its format from the
/// extension): `fill` writes the temporary at the path it is given (ending in `suffix`), which is
/// then fsynced and renamed like [`AtomicFile::commit`]; on error it is removed.
pub fn write_via_path(target: &Path, suffix: &str, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".dagsim.")
        .suffix(suffix)
        .tempfile_in(dir)
        .map_err(|e| Error::io(target, e))?;
    let tmp_path = tmp.path().to_path_buf();
    register(&tmp_path);
    let done = fill(&tmp_path).and_then(|()| {
        let io = |e: std::io::Error| Error::io(target, e);
        std::fs::File::open(&tmp_path).and_then(|f| f.sync_all()).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp_path, std::fs::Permissions::from_mode(0o644)).map_err(io)?;
        }
        tmp.persist(target).map_err(|e| io(e.error))?;
        #[cfg(unix)]
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(())
    });
    unregister(&tmp_path);
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_neither_target_nor_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        std::fs::write(&target, "old").unwrap();
        let e = write_atomically(&target, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk on fire"))
        });
        assert!(e.unwrap_err().to_string().contains("disk on fire"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the temporary is gone");
    }

    #[test]
    fn a_commit_replaces_the_target_and_unregisters() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        write_atomically(&target, |w| w.write_all(b"a,b\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "a,b\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn live_temporaries_are_removed_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let f = AtomicFile::create(&dir.path().join("x")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        remove_matching(|p| p.starts_with(dir.path())); // as remove_live, but leaves other tests' files
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(f);
    }
}
