//! A real OCI registry on loopback (Debian's docker-registry, distribution 2.8), started by
//! tests/oci/registry.sh in a directory of its own, stopped when dropped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry.
pub struct LocalRegistry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its directory: `storage/` is its filesystem storage.
    pub dir: tempfile::TempDir,
}

impl LocalRegistry {
    /// Starts one on a free loopback port and waits until it answers.
    pub fn start() -> LocalRegistry {
        let dir = tempfile::tempdir().expect("registry dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("bash")
            .arg(crate::crate_dir().join("oci/registry.sh"))
            .args(["serve", &dir.path().display().to_string(), &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let addr = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "docker-registry did not start on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        LocalRegistry { child, addr, dir }
    }

    /// Stops it (the registry is down from now on).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The file that holds blob `digest` (`sha256:…`) in its storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        blobs(self.dir.path()).join(&hex[..2]).join(hex).join("data")
    }
}

fn blobs(dir: &Path) -> PathBuf {
    dir.join("storage/docker/registry/v2/blobs/sha256")
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
