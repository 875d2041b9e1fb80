//! A moto server for one test: started from the virtualenv `KARPENTER_MOTO_VENV` names (default
//! `<workspace>/target/moto-venv`, which `.ci/run` creates) on a free 127.0.0.1 port, waited for until it
//! answers, and killed when dropped.
//!
//! When moto is not installed, [`MotoServer::start`] returns `None` so a developer without Python can still run
//! the other tests, except under CI (`CI=true`), where a missing moto fails the test instead of skipping it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use karpenter_testing::Stopwatch;

/// How long moto may take to answer after it was started.
const STARTUP: Duration = Duration::from_secs(60);

/// A running moto server.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    port: u16,
}

fn workspace_root() -> PathBuf {
    // crates/karpenter-aws -> the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn venv() -> PathBuf {
    std::env::var_os("KARPENTER_MOTO_VENV")
        .map(PathBuf::from)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| workspace_root().join("target/moto-venv"))
}

/// The command that runs moto's server: the virtualenv's python, or (for a `pip install --target` directory)
/// the system python3 with the directory on PYTHONPATH.
fn moto_command(venv: &Path) -> Option<Command> {
    let python = venv.join("bin/python");
    if python.exists() {
        let mut c = Command::new(python);
        c.args(["-m", "moto.server"]);
        return Some(c);
    }
    if venv.join("moto/server.py").exists() {
        let mut c = Command::new("python3");
        c.env("PYTHONPATH", venv).args(["-m", "moto.server"]);
        return Some(c);
    }
    None
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local address").port()
}

fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /moto-api/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

impl MotoServer {
    /// Starts moto, or `None` when it is not installed and this is not CI (where that panics).
    pub fn start() -> Option<Self> {
        let venv = venv();
        let Some(mut command) = moto_command(&venv) else {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "moto is not installed under {} (CI=true: failing instead of skipping)", venv.display());
            eprintln!("moto is not installed under {}: skipping (set KARPENTER_MOTO_VENV)", venv.display());
            return None;
        };
        // A port taken between the probe and moto's bind makes moto exit; retry with another.
        for _ in 0..3 {
            let port = free_port();
            let mut child = command
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting moto from {}: {e}", venv.display()));
            // A real process starting: real time.
            let starting = Stopwatch::start();
            while starting.elapsed() < STARTUP {
                if answers(port) {
                    return Some(Self { child, port });
                }
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            command = moto_command(&venv).expect("moto command");
        }
        panic!("moto did not answer on 127.0.0.1 within {STARTUP:?}");
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
