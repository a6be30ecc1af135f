//! What the compile worker confines itself to before it reads a component: cranelift runs on
//! bytes anyone may have written, so a compiler bug must find a process that holds and reaches
//! nothing.
//!
//! The parent starts the worker with an empty environment, in `/`, in a process group of its
//! own (killed whole at the time limit), under `RLIMIT_DATA` (see the compile module). The worker
//! then, before it reads a byte of input ([`confine`]):
//! - leaves the host's network: a network namespace of its own (as root, or in a user
//!   namespace of its own where the kernel lets users make them), with no interface but a
//!   loopback that is down;
//! - gives up the file system and TCP with Landlock: every file-system access right and TCP
//!   bind and connect handled, none granted (what it has open, its pipes, stays usable), and
//!   abstract Unix sockets and signals scoped to itself where the kernel has them (ABI 6);
//!   exec is among the rights, so it can run no program;
//! - may not write a file or a core dump (`RLIMIT_FSIZE`, `RLIMIT_CORE` 0), nor open more than
//!   [`MAX_FILES`] descriptors.
//!
//! A layer the kernel does not offer is skipped and named ([`Confinement::missing`]); the host
//! logs it once, so an operator knows what a worker on this machine can still do.

use ::landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetStatus, Scope};

/// Descriptors the worker may hold: its three pipes and a few for the engine.
pub const MAX_FILES: u64 = 16;

/// The prefix of the lines a worker writes to stderr about a layer it could not apply.
pub const MISSING_PREFIX: &str = "quarry-confine: without ";

/// What [`confine`] applied, and what not (and why).
#[derive(Debug, Default)]
pub struct Confinement {
    /// The layers in force.
    pub applied: Vec<&'static str>,
    /// The layers this kernel or user could not have, with why.
    pub missing: Vec<String>,
}

/// Confines this process (the compile worker) as the module docs say. Call it first, while the
/// process has one thread (a user namespace needs that).
pub fn confine() -> Confinement {
    let mut c = Confinement::default();
    match own_network() {
        Ok(how) => c.applied.push(how),
        Err(e) => c.missing.push(format!("a network namespace ({e})")),
    }
    match landlock() {
        Ok(RulesetStatus::FullyEnforced) => c.applied.push("landlock"),
        Ok(RulesetStatus::PartiallyEnforced) => {
            c.applied.push("landlock (partly)");
            c.missing.push("some Landlock rights (an older kernel)".into());
        }
        Ok(RulesetStatus::NotEnforced) => c.missing.push("Landlock (not in this kernel)".into()),
        Err(e) => c.missing.push(format!("Landlock ({e})")),
    }
    for (resource, value, name) in [
        (libc::RLIMIT_FSIZE, 0, "file writes"),
        (libc::RLIMIT_CORE, 0, "core dumps"),
        (libc::RLIMIT_NOFILE, MAX_FILES, "open files"),
    ] {
        let limit = libc::rlimit { rlim_cur: value as libc::rlim_t, rlim_max: value as libc::rlim_t };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(resource, &limit) } == 0 {
            c.applied.push(name);
        } else {
            c.missing.push(format!("a limit on {name} ({})", std::io::Error::last_os_error()));
        }
    }
    c
}

/// A network namespace of this process's own: directly where it may (root), else inside a user
/// namespace of its own.
fn own_network() -> std::io::Result<&'static str> {
    // SAFETY: unshare takes flags and changes only this process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
        return Ok("network namespace");
    }
    // SAFETY: as above.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } == 0 {
        return Ok("user and network namespaces");
    }
    Err(std::io::Error::last_os_error())
}

/// Every file-system right, TCP bind and connect, and the scopes, handled and none granted.
fn landlock() -> Result<RulesetStatus, ::landlock::RulesetError> {
    let abi = ABI::V6;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .restrict_self()?;
    Ok(status.ruleset)
}

/// The probe a test runs in a worker (`quarry __compile --probe PATH ADDR`): confined as a
/// worker is, it tries to read `path`, connect to TCP `addr` and send a UDP datagram to it, and
/// lists the environment it sees. Returns a JSON object of what happened.
pub fn probe(path: &str, addr: &str) -> serde_json::Value {
    let confinement = confine();
    let outcome = |r: std::io::Result<()>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    let read = outcome(std::fs::read(path).map(|_| ()));
    let write = outcome(std::fs::write("/tmp/quarry-probe-write", b"x"));
    let connect = outcome(
        addr.parse::<std::net::SocketAddr>()
            .map_err(std::io::Error::other)
            .and_then(|a| std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).map(|_| ())),
    );
    let udp = outcome(std::net::UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(b"x", addr).map(|_| ())));
    let exec = outcome(std::process::Command::new("/bin/true").status().map(|_| ()));
    serde_json::json!({
        "applied": confinement.applied,
        "missing": confinement.missing,
        "read": read,
        "write": write,
        "connect": connect,
        "udp": udp,
        "exec": exec,
        "env": std::env::vars().map(|(k, _)| k).collect::<Vec<_>>(),
    })
}
