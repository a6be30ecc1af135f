//! Shared test harness: fixture components, a temp-dir environment that writes
//! a config the way a user would, and helpers to drive the host and the CLI.

pub mod fakes;
pub mod local_prometheus;
pub mod mcp_client;
pub mod oci_registry;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use quarry::{CallError, Config, Fault, Registry};

/// The hostile fixture (see components/hostile).
pub const HOSTILE: &str = env!("QUARRY_FIXTURE_HOSTILE");
/// The MCP conformance suite's reference tools (see tests/components/conformance).
pub const CONFORMANCE: &str = env!("QUARRY_FIXTURE_CONFORMANCE");
/// Echo, version 1.
pub const ECHO_V1: &str = env!("QUARRY_FIXTURE_ECHO_V1");
/// Echo, version 2.
pub const ECHO_V2: &str = env!("QUARRY_FIXTURE_ECHO_V2");
/// A deterministic toy embedder (exports `model` and `embedder`).
pub const TOY_EMBEDDER: &str = env!("QUARRY_FIXTURE_TOY_EMBEDDER");
/// A tool importing `embedder`.
pub const EMBED_PROBE: &str = env!("QUARRY_FIXTURE_EMBED_PROBE");

/// A temporary directory with `plugins/`, a config file and a private cache.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("plugins")).expect("plugins dir");
        TestEnv { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copies a fixture to `plugins/<name>.wasm` and returns its path.
    pub fn plugin(&self, fixture: &str, name: &str) -> PathBuf {
        let dest = self.path(&format!("plugins/{name}.wasm"));
        std::fs::copy(fixture, &dest).expect("copy fixture");
        dest
    }

    /// Replaces a file atomically (write beside, then rename), as a deploy would.
    pub fn replace(&self, dest: &Path, bytes: &[u8]) {
        let tmp = dest.with_extension("tmp-new");
        std::fs::write(&tmp, bytes).expect("write new version");
        std::fs::rename(&tmp, dest).expect("rename new version");
    }

    /// Writes `quarry.toml` with a `[host]` section using a shared test cache.
    pub fn config(&self, body: &str) -> PathBuf {
        let path = self.path("quarry.toml");
        let text = format!("[host]\ncache_dir = {:?}\n\n{body}", shared_cache().display());
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// The host of config `body`, every instance opened and prepared (its index built); panics on
    /// a config error or an instance that failed.
    pub async fn host(&self, body: &str) -> Arc<Registry> {
        let host = self.opened_host(body).await;
        let unprepared = host.prepared().await;
        assert!(unprepared.is_empty(), "instances failed to prepare: {unprepared:?}");
        host
    }

    /// The host of config `body`, every instance opened, their preparation still under way.
    pub async fn opened_host(&self, body: &str) -> Arc<Registry> {
        let cfg = Config::load(&self.config(body)).expect("valid config");
        let host = Registry::new(cfg).expect("host");
        let failures = host.load_all().await;
        assert!(failures.is_empty(), "instances failed to load: {failures:?}");
        host
    }
}

/// The toy embedder as instance `toy` (64 dimensions, a 256-token window, one instance), the
/// `[embedders.toy]` section of a config whose tools use `embedder = "toy"`; the component is
/// `plugins/toy.wasm` ([`TestEnv::with_chapter_rag`] puts it there).
pub const TOY_SECTION: &str = r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = { dimension = 64, max_tokens = 256 }
pool = 1
"#;

/// Chapter-rag (`plugins/chapters.wasm`, the toy embedder) as instance `a` with a pool of `pool`
/// over `docs/m.md`, its index in corpus `manual`, which `corpus` defines (`[corpora.manual]`,
/// and what it names).
pub fn chapter_rag_on_corpus(corpus: &str, pool: usize) -> String {
    format!(
        r#"{TOY_SECTION}
{corpus}
[tools.a]
component = "plugins/chapters.wasm"
embedder = "toy"
pool = {pool}
config = {{ manual = "/docs/m.md", corpus = "manual" }}
[tools.a.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
corpora = [{{ name = "manual", mode = "rw" }}]
memory = "1GiB"
deadline = "120s"
"#
    )
}

/// A small manual: two chapters with sections, one of them on `--bwlimit` with a timetable.
pub fn small_manual() -> String {
    let para = |t: &str| format!("This paragraph explains {t} for the reader in some detail. ").repeat(16);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\nUse --bwlimit with a timetable. {}\n",
        para("installation"),
        para("linux packages"),
        para("windows installers"),
        para("syncing folders"),
        para("bandwidth limits"),
    )
}

/// What a chapter-rag answer must keep wherever its corpus is: the chapters it routes to, and
/// its passages, in order. (The routing's confidences are left out: a Couchbase corpus's scores
/// cross JSON as decimals, so a confidence may round apart in its last printed digit.)
pub fn routed_passages(answer: &str) -> (Vec<String>, String) {
    let routed = answer.lines().next().unwrap_or_default();
    let chapters = routed
        .trim_start_matches("Routed to: ")
        .split("; ")
        .map(|c| c.split(" (confidence").next().unwrap_or_default().to_string())
        .collect();
    (chapters, answer.split_once("\n\n[1]").map(|(_, p)| p.to_string()).unwrap_or_default())
}

impl TestEnv {
    /// A test environment for chapter RAG: the toy embedder and chapter-rag as
    /// `plugins/toy.wasm` and `plugins/chapters.wasm`, and empty `docs/` and `index/`.
    pub fn with_chapter_rag() -> TestEnv {
        let env = TestEnv::new();
        env.plugin(TOY_EMBEDDER, "toy");
        env.plugin(CHAPTER_RAG, "chapters");
        for d in ["docs", "index"] {
            std::fs::create_dir_all(env.path(d)).expect("docs and index dirs");
        }
        env
    }
}

impl TestEnv {
    /// Where the host keeps instance `instance`'s own corpus (`corpus = "self"`) for the config
    /// [`TestEnv::config`] writes: one directory per shape under it (the toy's `64-cosine`).
    pub fn own_corpus(&self, instance: &str) -> PathBuf {
        quarry::config::private_dir(&shared_cache(), &self.path("quarry.toml"), instance).join("corpus")
    }
}

/// The instances' own corpora of this environment's config go with it: they are kept in the
/// shared test cache, named after the config file, which no later test writes again.
impl Drop for TestEnv {
    fn drop(&mut self) {
        let mine = quarry::config::private_dir(&shared_cache(), &self.path("quarry.toml"), "");
        let (Some(parent), Some(suffix)) = (mine.parent(), mine.file_name()) else { return };
        let suffix = suffix.to_string_lossy().into_owned();
        for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().ends_with(suffix.as_str()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The generation committed in local corpus directory `dir` (`None`: no database there).
pub fn corpus_generation(dir: &Path) -> Option<u64> {
    quarry_corpus::LocalCorpus::stored_generation(dir)
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

/// The config of a hostile instance `h` (components/hostile) with a read-only `/data` holding
/// `ok.txt`, a writable `/scratch`, 64 MiB, `deadline` and the `extra` grant lines; creates the
/// directories and copies the component into `env`.
pub fn hostile_config(env: &TestEnv, deadline: &str, extra: &str) -> String {
    std::fs::create_dir_all(env.path("data")).expect("data dir");
    std::fs::create_dir_all(env.path("scratch")).expect("scratch dir");
    std::fs::write(env.path("data/ok.txt"), "granted content").expect("data file");
    env.plugin(HOSTILE, "hostile");
    format!(
        r#"
[tools.h]
component = "plugins/hostile.wasm"
[tools.h.grants]
dirs = [{{ host = "data", guest = "/data" }}, {{ host = "scratch", guest = "/scratch", mode = "rw" }}]
memory = "64MiB"
deadline = "{deadline}"
{extra}
"#
    )
}

/// This crate's directory, as cargo gives it to the running test (`cargo test` and `cargo bench`
/// set `CARGO_MANIFEST_DIR`). Not `env!`: cargo reuses a test binary built in another checkout
/// that shares the target dir (CI's clean clone does), and `env!` would point it at that
/// checkout's files.
pub fn crate_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// One precompiled-component cache for the whole test run, so each fixture is compiled once:
/// in the target dir (target/test-cache), beside the fixtures it caches.
pub fn shared_cache() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.ancestors().nth(3).expect("target/<profile>/deps/<exe>").join("test-cache");
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir.canonicalize().expect("cache dir")
}

/// The `quarry` binary beside the test executable (target/<profile>/quarry).
pub fn quarry_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    let bin = dir.join("quarry");
    assert!(bin.is_file(), "{} is missing: run `cargo build -p quarry` first (`make test` does)", bin.display());
    bin
}

/// Runs the `quarry` binary in `env`'s directory with `args` (no `QUARRY_CONFIG`): its exit
/// code, stdout and stderr.
pub fn run_quarry(env: &TestEnv, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(quarry_bin())
        .current_dir(env.dir.path())
        .args(args)
        .env_remove("QUARRY_CONFIG")
        .output()
        .expect("run quarry");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `fut` with a timeout, so a hung host fails the test instead of the run.
pub async fn within<T>(secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut).await.expect("timed out")
}

/// Waits (at most 30 s) until `cond` holds: the event a test orders on, instead of a sleep
/// that a loaded machine outlasts.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting until {what}");
}

/// The embedder component (components/embedder-onnx), built for the tests.
pub const EMBEDDER_ONNX: &str = env!("QUARRY_FIXTURE_EMBEDDER_ONNX");
/// The DOCX search component (components/docx-search).
pub const DOCX_SEARCH: &str = env!("QUARRY_FIXTURE_DOCX_SEARCH");
/// The chapter RAG component (components/chapter-rag).
pub const CHAPTER_RAG: &str = env!("QUARRY_FIXTURE_CHAPTER_RAG");
/// The Bedrock knowledge-base component (components/bedrock-kb).
pub const BEDROCK_KB: &str = env!("QUARRY_FIXTURE_BEDROCK_KB");
/// The Couchbase vector search component (components/couchbase-search).
pub const COUCHBASE_SEARCH: &str = env!("QUARRY_FIXTURE_COUCHBASE_SEARCH");

/// What a test needs beyond the build: `make test` sets each up, a bare `cargo test` may lack it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The converted models (`make models`).
    Models,
    /// The MCP clients' Python venvs (`tests/mcp/venvs.sh`).
    Venvs,
    /// The official MCP conformance suite (`tests/mcp/conformance/install.sh`).
    Conformance,
    /// Debian's docker-registry (`tests/oci/registry.sh install`).
    Registry,
    /// onnxruntime's library, from the pinned wheel `make models` installs beside the models.
    Onnxruntime,
    /// An onnxruntime older than the host needs (`tests/nn/old-onnxruntime.sh`).
    OldOnnxruntime,
    /// A tmpfs mounted in a private mount namespace (`unshare -m`, as root): a disk that fills.
    Mount,
    /// Debian's Prometheus server (`tests/metrics/prometheus.sh install`).
    Prometheus,
}

impl Need {
    fn present(self) -> bool {
        match self {
            Need::Models => {
                ["all-minilm-l6-v2", "all-minilm-l6-v2-int8", "all-minilm-l6-v2-q8", "multilingual-e5-small"]
                    .iter()
                    .all(|m| models_root().join(m).join("quarry-model.json").is_file())
            }
            Need::Venvs => ["mcp1", "mcp2", "crewai"].iter().all(|v| venvs_root().join(v).join("bin/python").is_file()),
            Need::Conformance => conformance_index().is_file(),
            Need::Registry => on_path("docker-registry"),
            Need::Prometheus => on_path("prometheus"),
            Need::Onnxruntime => quarry::capability::nn::ort_library::locate(None).is_ok(),
            Need::OldOnnxruntime => old_onnxruntime().is_file(),
            Need::Mount => std::process::Command::new("unshare")
                .args([
                    "-m",
                    "sh",
                    "-c",
                    "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && umount \"$d\" && rmdir \"$d\"",
                ])
                .output()
                .is_ok_and(|o| o.status.success()),
        }
    }

    fn how(self) -> &'static str {
        match self {
            Need::Onnxruntime => "onnxruntime's library: run `make models`",
            Need::OldOnnxruntime => "an old onnxruntime: run `bash tests/nn/old-onnxruntime.sh`",
            Need::Models => "the models: run `make models`",
            Need::Venvs => "the MCP clients' venvs: run `bash tests/mcp/venvs.sh`",
            Need::Conformance => {
                "the MCP conformance suite: run `bash tests/mcp/conformance/install.sh` (needs Node 20+)"
            }
            Need::Registry => "an OCI registry: run `bash tests/oci/registry.sh install` (Debian's docker-registry)",
            Need::Mount => "a small file system of its own: run as root, with util-linux's unshare (make test does)",
            Need::Prometheus => {
                "a Prometheus server: run `bash tests/metrics/prometheus.sh install` (Debian's prometheus)"
            }
        }
    }
}

/// Whether program `name` is on the `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Whether the calling test must be skipped for want of `need`. In a bare `cargo test` (the
/// quick tier) it is, and the terminal says which test and how to get what it needs; under
/// `make test` (`QUARRY_TEST_ALL=1`) nothing is skipped, and a missing set-up fails the test.
pub fn skip_unless(need: Need) -> bool {
    if need.present() {
        return false;
    }
    let strict = std::env::var_os("QUARRY_TEST_ALL").is_some_and(|v| v == "1");
    assert!(!strict, "missing {} (make test does)", need.how());
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    // Written past the test harness's capture, which keeps only the print macros' output.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped {test}: it needs {}, or run `make test`", need.how());
    true
}

/// The library of an onnxruntime older than the host needs, where
/// `tests/nn/old-onnxruntime.sh` puts it.
pub fn old_onnxruntime() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quarry/old-onnxruntime/libonnxruntime.so")
}

fn models_root() -> PathBuf {
    std::env::var_os("QUARRY_MODELS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quarry/models"))
}

fn venvs_root() -> PathBuf {
    std::env::var_os("QUARRY_VENVS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quarry/venvs"))
}

/// Where `tests/mcp/conformance/install.sh` installs its npm packages.
fn conformance_dir() -> PathBuf {
    std::env::var_os("QUARRY_CONFORMANCE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quarry/conformance")
    })
}

/// The conformance suite's entry point, where `tests/mcp/conformance/install.sh` puts it.
pub fn conformance_index() -> PathBuf {
    conformance_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
}

/// The MCP Inspector's command (`mcp-inspector --cli ...`), installed beside the conformance
/// suite.
pub fn inspector_bin() -> PathBuf {
    conformance_dir().join("node_modules/.bin/mcp-inspector")
}

/// Where `make models` put the converted models.
pub fn models_dir() -> PathBuf {
    let dir = models_root();
    assert!(
        dir.join("all-minilm-l6-v2/quarry-model.json").is_file(),
        "no models in {}: run `make models` (make test does)",
        dir.display()
    );
    dir
}

/// Config for `[embedders.minilm]`: the real all-MiniLM-L6-v2 from the models cache as
/// `[models.minilm]`, `pool` instances, with the embedder component copied to
/// `plugins/embedder-onnx.wasm`.
pub fn minilm_embedder(pool: usize) -> String {
    embedder_on(pool, "tract", "all-minilm-l6-v2")
}

/// [`minilm_embedder`] with model directory `model` (from the models cache) run by `backend`;
/// `[models.minilm]` and `[embedders.minilm]` still, so configs read the same. Its lines go at
/// the top of a config: they end `[host]` with the onnxruntime library.
pub fn embedder_on(pool: usize, backend: &str, model: &str) -> String {
    let library = match backend {
        "onnxruntime" => {
            let lib = quarry::capability::nn::ort_library::locate(None).unwrap_or_else(|e| panic!("{e}"));
            format!("onnxruntime = {{ library = {lib:?} }}\n")
        }
        _ => String::new(),
    };
    format!(
        r#"{library}
[models.minilm]
dir = {dir:?}
backend = "{backend}"
[embedders.minilm]
component = "plugins/embedder-onnx.wasm"
config = {{ model = "minilm" }}
pool = {pool}
[embedders.minilm.grants]
models = ["minilm"]
memory = "1GiB"
deadline = "600s"
"#,
        dir = models_dir().join(model).display()
    )
}

/// The backend and model a bench runs (`QUARRY_BENCH_BACKEND`, default tract;
/// `QUARRY_BENCH_MODEL`, default all-minilm-l6-v2).
pub fn bench_model() -> (String, String) {
    let var = |v: &str, d: &str| std::env::var(v).ok().filter(|s| !s.is_empty()).unwrap_or_else(|| d.to_string());
    (var("QUARRY_BENCH_BACKEND", "tract"), var("QUARRY_BENCH_MODEL", "all-minilm-l6-v2"))
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The shared test data (../shared/data beside the checkout).
pub fn shared_data() -> PathBuf {
    std::env::var_os("QUARRY_SHARED_DATA").map(PathBuf::from).unwrap_or_else(|| crate_dir().join("../../shared/data"))
}

/// The Python of venv `name`, made by tests/mcp/venvs.sh (`make test` runs it).
pub fn venv_python(name: &str) -> PathBuf {
    let python = venvs_root().join(name).join("bin/python");
    assert!(python.is_file(), "{} is missing: run tests/mcp/venvs.sh (`make test` does)", python.display());
    python
}

/// What a child process did: [`run_with_timeout`].
pub struct ProcessOutput {
    /// Exited with status 0 in time.
    pub success: bool,
    /// Its stdout, lossily decoded.
    pub stdout: String,
    /// Its stderr, lossily decoded, with a note when it was killed.
    pub stderr: String,
}

/// Runs `cmd` to completion, killing it after `limit`: a hung client fails its test instead of
/// hanging the run.
pub fn run_with_timeout(mut cmd: std::process::Command, limit: Duration) -> ProcessOutput {
    use std::io::Read;
    use std::process::Stdio;

    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let start = std::time::Instant::now();
    let (status, killed) = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break (Some(status), false);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = err.join().unwrap_or_default();
    if killed {
        stderr.push_str(&format!("\n(killed after {limit:?})"));
    }
    ProcessOutput { success: status.is_some_and(|s| s.success()), stdout: out.join().unwrap_or_default(), stderr }
}

/// Decodes `%XX` escapes in a URL path segment (the fakes route on decoded names); a bad
/// escape is kept as it is.
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The CPU this runs on and the instruction sets its kernels may use (tract and onnxruntime
/// both pick theirs at run time from what the CPU reports), for benches to print.
pub fn cpu_line() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        info.lines().find_map(|l| l.strip_prefix("model name")).map_or("?", |m| m.trim_start_matches([' ', '\t', ':']));
    let flags: Vec<&str> =
        info.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or_default().split_whitespace().collect();
    let has: Vec<&str> = ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
        .into_iter()
        .filter(|f| flags.contains(f))
        .collect();
    format!(
        "CPU: {model}, {} cores; kernels may use: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        has.join(" ")
    )
}

/// The questions of the rclone manual's labelled set (`data/manuals/rclone/questions.jsonl`), for
/// the benches.
pub fn rclone_questions() -> Vec<String> {
    let path = shared_data().join("manuals/rclone/questions.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["question"].as_str().map(str::to_string))
        .collect()
}

/// The CPU seconds (user and system) process `pid` has used, from `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // /proc reports in USER_HZ, 100 a second on Linux.
    ticks / 100.0
}
