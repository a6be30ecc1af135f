//! The directory-RAG crew (components/chapter-rag/crew) end to end: CrewAI's router, searcher
//! and answerer agents driving `quarry serve --stdio` over MCP, on the bundled rclone manual
//! (toy embedder, so the index takes seconds), with a scripted OpenAI-compatible LLM
//! (tests/crew/scripted_llm.py, on loopback) answering with native tool calls in place of a
//! model. What crossed MCP is read back from the host's call log (`--call-log`), what reached
//! the model from the stub's request log, and each stage's output from the run folder.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quarry_tests::{TOY_SECTION, TestEnv, quarry_bin, venv_python};
use serde_json::{Value, json};

const QUESTION: &str = "Our nightly upload saturates the office line. Can rclone go slowly during working hours?";

fn crew_dir() -> PathBuf {
    quarry_tests::crate_dir().join("../components/chapter-rag/crew")
}

/// The scripted LLM, killed when dropped.
struct Stub {
    child: Child,
    port: u16,
}

impl Stub {
    fn start(script: &Path, requests: &Path) -> Stub {
        let mut child = Command::new(venv_python("crewai"))
            .arg(quarry_tests::crate_dir().join("crew/scripted_llm.py"))
            .arg(script)
            .arg(requests)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the scripted LLM");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok());
        let port = port.unwrap_or_else(|| panic!("the scripted LLM said {line:?}, not its port"));
        Stub { child, port }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One crew run: its output, the host's call log, the stub's requests and the run folder.
struct CrewRun {
    ok: bool,
    text: String,
    calls: Vec<Value>,
    requests: Vec<Value>,
    run_dir: PathBuf,
    _env: TestEnv,
}

impl CrewRun {
    /// `(tool without the instance, arguments without nulls)` of each call, in order.
    fn tool_calls(&self) -> Vec<(String, Value)> {
        self.calls
            .iter()
            .map(|c| {
                let tool = c["tool"].as_str().unwrap().trim_start_matches("rclone.").to_string();
                let args: serde_json::Map<String, Value> = c["arguments"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (tool, Value::Object(args))
            })
            .collect()
    }

    fn stage(&self, name: &str) -> Value {
        let path = self.run_dir.join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), self.text));
        serde_json::from_str(&text).unwrap()
    }

    /// The requests that reached the model from `agent`.
    fn asked_by(&self, agent: &str) -> Vec<&Value> {
        self.requests.iter().filter(|r| r["agent"] == agent).collect()
    }
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// How the crew reaches Quarry.
#[derive(Clone, Copy, PartialEq)]
enum Transport {
    /// The crew starts `quarry serve --stdio` itself (the default).
    Stdio,
    /// A `quarry serve --http` started by the test.
    Http,
}

fn run_crew(script: &Value) -> CrewRun {
    run_crew_over(script, Transport::Stdio)
}

fn run_crew_over(script: &Value, transport: Transport) -> CrewRun {
    let env = TestEnv::with_chapter_rag();
    let manual = quarry_tests::crate_dir().join("../host/demo/rclone");
    let config = env.config(&format!(
        r#"{TOY_SECTION}
[tools.rclone]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/manual/MANUAL.md", index_dir = "/index", similarity_threshold = 0.0 }}
[tools.rclone.grants]
dirs = [{{ host = {manual:?}, guest = "/manual" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
"#
    ));
    std::fs::write(env.path("script.json"), script.to_string()).unwrap();
    let stub = Stub::start(&env.path("script.json"), &env.path("requests.jsonl"));
    let log = env.path("calls.jsonl");
    let mut cmd = Command::new(venv_python("crewai"));
    cmd.current_dir(crew_dir()).arg("crew.py").arg(QUESTION).args(["--tools", "rclone"]);
    let served = match transport {
        Transport::Stdio => {
            cmd.arg("--config").arg(&config).arg("--quarry").arg(quarry_bin()).arg("--call-log").arg(&log);
            None
        }
        Transport::Http => {
            let args = [std::ffi::OsStr::new("--call-log"), log.as_os_str()];
            let served = quarry_tests::mcp_client::Served::start_with(&quarry_bin(), &config, &args, &[]);
            cmd.arg("--http").arg(&served.url);
            Some(served)
        }
    };
    cmd.arg("--runs")
        .arg(env.path("runs"))
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{}/v1", stub.port))
        .env("OPENAI_API_KEY", "test")
        // CrewAI's telemetry would try the network.
        .envs([("CREWAI_DISABLE_TELEMETRY", "true"), ("OTEL_SDK_DISABLED", "true"), ("ANONYMIZED_TELEMETRY", "False")]);
    let out = quarry_tests::run_with_timeout(cmd, Duration::from_secs(300));
    drop((stub, served));
    let text = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let runs: Vec<PathBuf> = std::fs::read_dir(env.path("runs"))
        .unwrap_or_else(|e| panic!("no run folder ({e})\n{text}"))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    CrewRun {
        ok: out.success,
        calls: jsonl(&env.path("calls.jsonl")),
        requests: jsonl(&env.path("requests.jsonl")),
        run_dir: runs[0].clone(),
        text,
        _env: env,
    }
}

fn tree(args: Value) -> Value {
    json!({"tool": "list_chapter_tree", "args": args})
}

fn content(text: &str) -> Value {
    json!({ "content": text })
}

fn route_json(chapters: &[&str], confidence: f64) -> String {
    json!({"chapters": chapters, "confidence": confidence, "reason": "bandwidth limits are options of rclone"})
        .to_string()
}

/// A script: the router's attempts, then the searcher searching `searched` (the first inside the
/// route, the second outside it) and the answerer validating and citing 90.10.5.
fn script(router: Value, searched: &str) -> Value {
    json!({
        "router": router,
        "searcher": [[
            {"tool": "search_chapter_content", "args": {"chapter_id": searched, "query": "limit bandwidth during working hours", "top_k": 5}},
            {"tool": "search_chapter_content", "args": {"chapter_id": "12", "query": "limit bandwidth", "top_k": 5}},
            content(r#"[{"chapter_id": "90.10.5", "chapter_title": "--bwlimit=BANDWIDTH_SPEC", "content": "--bwlimit takes a timetable", "score": 0.8}]"#),
        ]],
        "answerer": [[
            {"tool": "validate_citations", "args": {"cited": ["90.10.5"]}},
            content("Yes: give --bwlimit a timetable, slow by day and unlimited at night [chapter 90.10.5]."),
        ]],
    })
}

#[test]
fn the_crew_routes_searches_inside_the_route_and_validates_its_citations() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let router = json!([[
        tree(json!({"level": 1})),
        tree(json!({"level": 1, "under": "90"})),
        content(&route_json(&["90.10"], 0.9)),
    ]]);
    let r = run_crew(&script(router, "90.10"));
    assert!(r.ok, "the crew failed\n{}", r.text);
    assert!(r.text.contains("routed to: 90.10") && r.text.contains("[chapter 90.10.5]"), "{}", r.text);

    // What crossed MCP, in order: the tree in levels, the router's ids checked, the search
    // inside the route (the one outside was refused before it left the crew), the citations.
    // CrewAI's MCP adapter fills in the defaults the tool's schema declares (the threshold).
    assert_eq!(
        r.tool_calls(),
        vec![
            ("list_chapter_tree".into(), json!({"level": 1})),
            ("list_chapter_tree".into(), json!({"level": 1, "under": "90"})),
            ("validate_citations".into(), json!({"cited": ["90.10"], "candidates": ["90.10"]})),
            (
                "search_chapter_content".into(),
                json!({"chapter_id": "90.10", "query": "limit bandwidth during working hours", "top_k": 5, "similarity_threshold": 0.0})
            ),
            ("validate_citations".into(), json!({"cited": ["90.10.5"], "candidates": ["90.10"]})),
        ],
        "{}",
        r.text
    );
    assert!(r.calls.iter().all(|c| c["outcome"] == "ok" && c["session"] == r.calls[0]["session"]), "{:?}", r.calls);
    assert!(r.calls[0]["client"].as_str().is_some_and(|c| c.starts_with("mcp")), "{:?}", r.calls[0]);

    // The router's JSON was parsed and decided the scope.
    let router = r.stage("router");
    assert_eq!(router["attempts"].as_array().unwrap().len(), 1, "{router}");
    assert_eq!(router["attempts"][0]["parsed"]["confidence"], 0.9);
    assert_eq!(router["decided"]["chapters"], json!(["90.10"]));

    // The searcher stayed inside: its search elsewhere was refused, with the reason, and it saw
    // the decided route as its context.
    let search = r.stage("search");
    assert_eq!(search["searches"].as_array().unwrap().len(), 1);
    assert_eq!(search["refused"][0]["chapter_id"], "12");
    assert!(search["refused"][0]["reason"].as_str().unwrap().contains("outside the routed chapters (90.10)"));
    let searcher = r.asked_by("searcher");
    assert!(searcher[0]["request"].to_string().contains(r#"\"chapters\": [\"90.10\"]"#), "{}", searcher[0]);
    let refused = searcher[2]["request"]["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(refused.contains("outside the routed chapters"), "{refused}");

    // Each agent was offered its own tools only.
    for (agent, tool) in
        [("router", "list_chapter_tree"), ("searcher", "search_chapter_content"), ("answerer", "validate_citations")]
    {
        assert!(
            r.asked_by(agent).iter().all(|q| q["tools"] == json!([tool])),
            "{agent}: {:?}",
            r.asked_by(agent)[0]["tools"]
        );
    }

    // The answer's citations were validated against the route.
    let answer = r.stage("answer");
    assert_eq!(answer["citations"], json!(["90.10.5"]));
    assert_eq!(answer["validations"][0]["result"]["valid"], true);

    // The cost of the crew on this run (the figures of the crew's README).
    let run = r.stage("run");
    assert_eq!(run["stages"]["router"]["tool_calls"], 2);
    assert_eq!(run["stages"]["searcher"]["tool_calls"], 2);
    assert_eq!(run["stages"]["answerer"]["tool_calls"], 1);
    eprintln!("crew cost: {}", serde_json::to_string(&run["stages"]).unwrap());
    let in_tools: f64 = r.calls.iter().map(|c| c["duration_ms"].as_f64().unwrap()).sum();
    eprintln!(
        "crew wall time without the LLM: {} s of {} s ({in_tools:.1} ms in Quarry's tools)",
        run["wall_seconds_without_llm"], run["wall_seconds"]
    );
}

#[test]
fn the_crew_reaches_a_running_server_over_http() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let router = json!([[tree(json!({"level": 1})), content(&route_json(&["90.10"], 0.9))]]);
    let r = run_crew_over(&script(router, "90.10"), Transport::Http);
    assert!(r.ok, "the crew failed\n{}", r.text);
    let tools: Vec<String> = r.tool_calls().into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        tools,
        ["list_chapter_tree", "validate_citations", "search_chapter_content", "validate_citations"],
        "{}",
        r.text
    );
    assert_eq!(r.stage("answer")["citations"], json!(["90.10.5"]));
}

#[test]
fn a_router_answer_in_a_code_fence_is_read() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let fenced = format!("```json\n{}\n```", route_json(&["90.10"], 0.9));
    let r = run_crew(&script(json!([[tree(json!({"level": 1})), content(&fenced)]]), "90.10"));
    assert!(r.ok, "{}", r.text);
    let router = r.stage("router");
    assert_eq!(router["attempts"].as_array().unwrap().len(), 1, "no retry was needed: {router}");
    assert!(router["attempts"][0]["raw"].as_str().unwrap().starts_with("```json"));
    assert_eq!(router["decided"]["chapters"], json!(["90.10"]));
}

#[test]
fn a_router_answer_that_is_not_json_gets_one_retry_then_a_clear_error() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    // Prose, then JSON: the retry (told why) succeeds.
    let router = json!([
        [tree(json!({"level": 1})), content("Chapter 90.10 holds the bandwidth options.")],
        [content(&route_json(&["90.10"], 0.9))],
    ]);
    let r = run_crew(&script(router, "90.10"));
    assert!(r.ok, "{}", r.text);
    let retry = r.asked_by("router").into_iter().find(|q| q["attempt"] == 1).expect("a second attempt").to_string();
    assert!(retry.contains("the answer is not JSON"), "the retry was not told why: {retry}");

    // Prose twice: no search, and an error that says which stage and why.
    let router = json!([
        [tree(json!({"level": 1})), content("Chapter 90.10 holds the bandwidth options.")],
        [content("Still chapter 90.10, I am sure.")],
    ]);
    let r = run_crew(&script(router, "90.10"));
    assert!(!r.ok, "{}", r.text);
    assert!(
        r.text.contains("failed at the router: its answer was refused 2 times (one retry): the answer is not JSON"),
        "{}",
        r.text
    );
    assert_eq!(r.stage("router")["attempts"].as_array().unwrap().len(), 2);
    assert!(r.tool_calls().iter().all(|(t, _)| t == "list_chapter_tree"), "{:?}", r.tool_calls());
    assert!(r.asked_by("searcher").is_empty());
}

#[test]
fn a_chapter_id_that_does_not_exist_is_refused_with_the_nearest_ones() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let router = json!([
        [tree(json!({"level": 1})), content(&route_json(&["999.1"], 0.9))],
        [content(&route_json(&["90.10"], 0.9))],
    ]);
    let r = run_crew(&script(router, "90.10"));
    assert!(r.ok, "{}", r.text);
    let router = r.stage("router");
    let first = router["attempts"][0]["error"].as_str().unwrap();
    assert!(first.contains("999.1 (no such chapter; nearest: 99.1"), "{first}");
    let retry = r.asked_by("router").into_iter().find(|q| q["attempt"] == 1).unwrap().to_string();
    assert!(retry.contains("999.1 (no such chapter"), "{retry}");
    assert_eq!(router["decided"]["chapters"], json!(["90.10"]));
    let checks: Vec<Value> = r
        .tool_calls()
        .into_iter()
        .filter(|(t, _)| t == "validate_citations")
        .map(|(_, a)| a["cited"].clone())
        .collect();
    assert_eq!(checks, vec![json!(["999.1"]), json!(["90.10"]), json!(["90.10.5"])]);
}

#[test]
fn low_confidence_widens_the_search_to_the_parent_chapter() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let router = json!([[tree(json!({"level": 1})), content(&route_json(&["90.10.5"], 0.4))]]);
    // 90.10.3 is a sibling of the routed section: inside the widened scope.
    let r = run_crew(&script(router, "90.10.3"));
    assert!(r.ok, "{}", r.text);
    let decided = &r.stage("router")["decided"];
    assert_eq!(decided["chapters"], json!(["90.10"]));
    assert_eq!(decided["widened_from"], json!(["90.10.5"]));
    assert!(r.text.contains("routed to: 90.10\n"), "{}", r.text);
    let searched: Vec<Value> = r
        .tool_calls()
        .into_iter()
        .filter(|(t, _)| t == "search_chapter_content")
        .map(|(_, a)| a["chapter_id"].clone())
        .collect();
    assert_eq!(searched, vec![json!("90.10.3")]);
}

#[test]
fn an_answer_citing_what_it_did_not_validate_is_sent_back() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let mut s = script(json!([[tree(json!({"level": 1})), content(&route_json(&["90.10"], 0.9))]]), "90.10");
    s["answerer"] = json!([
        [content("Use --bwlimit [chapter 90.10.5].")],
        [{"tool": "validate_citations", "args": {"cited": ["90.10.5"]}}, content("Use --bwlimit [chapter 90.10.5].")],
    ]);
    let r = run_crew(&s);
    assert!(r.ok, "{}", r.text);
    let answer = r.stage("answer");
    assert!(answer["attempts"][0]["error"].as_str().unwrap().contains("without validate_citations accepting them"));
    assert_eq!(answer["citations"], json!(["90.10.5"]));
}

#[test]
fn the_crews_own_checks() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let mut cmd = Command::new(venv_python("crewai"));
    cmd.current_dir(crew_dir()).args(["-m", "unittest", "-v", "test_guards"]);
    let out = quarry_tests::run_with_timeout(cmd, Duration::from_secs(120));
    assert!(out.success, "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
}

#[test]
fn a_quarry_that_cannot_start_is_a_clear_error() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let env = TestEnv::new();
    std::fs::write(env.path("broken.toml"), "[tools.x\n").unwrap();
    std::fs::write(env.path("ok.toml"), "").unwrap();
    std::fs::write(env.path("a-file"), "").unwrap();
    let runs = env.path("runs");
    let cases = [
        (env.path("missing.toml"), quarry_bin(), runs.clone(), "no Quarry config at"),
        (env.path("broken.toml"), quarry_bin(), runs.clone(), "is not a valid TOML config"),
        (env.path("ok.toml"), env.path("no-quarry"), runs.clone(), "cannot run the quarry binary"),
        (env.path("ok.toml"), quarry_bin(), env.path("a-file/runs"), "cannot make a run folder under"),
    ];
    for (config, quarry, runs_dir, says) in cases {
        let mut cmd = Command::new(venv_python("crewai"));
        cmd.current_dir(crew_dir())
            .arg("crew.py")
            .arg(QUESTION)
            .arg("--config")
            .arg(&config)
            .arg("--quarry")
            .arg(&quarry)
            .arg("--runs")
            .arg(&runs_dir)
            .envs([
                ("CREWAI_DISABLE_TELEMETRY", "true"),
                ("OTEL_SDK_DISABLED", "true"),
                ("ANONYMIZED_TELEMETRY", "False"),
            ]);
        let out = quarry_tests::run_with_timeout(cmd, Duration::from_secs(120));
        assert!(!out.success && out.stderr.contains(says), "{says}: {}", out.stderr);
        assert!(!runs.exists(), "no run folder for a run that never started");
    }
}

/// A small manual whose chapter 2.1 answers the bandwidth question.
fn small_manual() -> String {
    let para = |topic: &str| format!("This paragraph explains {topic} for the reader in some detail. ").repeat(8);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\nUse --bwlimit with a timetable to limit the bandwidth of a transfer. {}\n",
        para("installation"),
        para("linux packages"),
        para("syncing folders"),
        para("bandwidth limits"),
    )
}

/// Chapter RAG's resources, template, completion, hit resources and answerer prompt through the
/// official Python SDK, and its routes asking the client's model (the scripted router) through
/// MCP sampling: the model read the chapter tree and the question, and its pick leads the route.
#[test]
fn chapter_rag_serves_its_chapters_and_routes_through_the_clients_model() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let env = TestEnv::new();
    env.plugin(quarry_tests::TOY_EMBEDDER, "toy");
    env.plugin(quarry_tests::CHAPTER_RAG, "chapters");
    std::fs::create_dir_all(env.path("docs")).unwrap();
    std::fs::write(env.path("docs/MANUAL.md"), small_manual()).unwrap();
    let config = env.config(&format!(
        r#"{TOY_SECTION}
[tools.manual]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/docs/MANUAL.md", similarity_threshold = 0.0 }}
[tools.manual.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
client = ["sampling"]
memory = "1GiB"
deadline = "120s"
"#
    ));
    let routed = json!({"chapters": ["2.1", "2"], "confidence": 0.8, "reason": "bandwidth limits are in 2.1"});
    // Asked three times: by the search, by the answer prompt's search, and by `route` (every
    // route of the instance is the same one).
    let turn = json!([{"content": routed.to_string()}]);
    let script = json!({"router": [turn, turn, turn]});
    std::fs::write(env.path("script.json"), script.to_string()).unwrap();
    let stub = Stub::start(&env.path("script.json"), &env.path("requests.jsonl"));
    let mut cmd = Command::new(venv_python("mcp1"));
    let scripts = quarry_tests::crate_dir().join("mcp");
    cmd.current_dir(&scripts).arg(scripts.join("chapters_surface.py")).env("PYTHONUNBUFFERED", "1");
    cmd.arg("--quarry").arg(quarry_bin()).arg("--config").arg(&config);
    cmd.args(["--llm", &format!("http://127.0.0.1:{}", stub.port), "--question", QUESTION, "--route", "2.1,2"]);
    let out = quarry_tests::run_with_timeout(cmd, Duration::from_secs(300));
    let text = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.success && out.stdout.contains("] ok"), "chapters_surface.py failed\n{text}");
    // What reached the model: the router's instructions, the tree, the question; once a route.
    let requests = jsonl(&env.path("requests.jsonl"));
    assert_eq!(requests.len(), 3, "{requests:?}");
    let asked = requests[0]["request"]["messages"].to_string();
    for part in ["You are Router", "1 Installing", "2.1 Bandwidth", "Syncing", "nightly upload"] {
        assert!(asked.contains(part), "{part:?} did not reach the model: {asked}");
    }
}
