//! The Bedrock knowledge-base component in the real host, through the host's `bedrock`
//! capability (the real AWS SDK), against the local fake Bedrock (`fakes/bedrock.rs`), which
//! checks every SigV4 signature and records every request.
//!
//! Each case runs `quarry call` as a process, as a user would: credentials and region come
//! from its environment (set per case), never from the config or the component.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use quarry_tests::fakes::bedrock::{self as fb, Fake};
use quarry_tests::{BEDROCK_KB, HOSTILE, TestEnv, quarry_bin};
use serde_json::{Value, json};

/// What one `quarry call` did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "quarry call failed: {}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// The error line of a failed call.
    fn error(&self) -> &str {
        assert_ne!(self.code, Some(0), "the call should fail: {}", self.stdout);
        self.stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or(&self.stderr)
    }
}

/// The credentials the fake accepts, in a region it signs for, with nothing read from ~/.aws.
fn aws_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", fb::ACCESS_KEY.into()),
        ("AWS_SECRET_ACCESS_KEY", fb::SECRET_KEY.into()),
        ("AWS_REGION", fb::REGION.into()),
        ("AWS_CONFIG_FILE", "/nonexistent/quarry-test".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/quarry-test".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

struct Case {
    env: TestEnv,
    config: PathBuf,
}

/// A config with one instance `kb` of the component; `tool_config` is its `config` table and
/// `grant` the body of its `grants.bedrock` table (the fake's endpoint is added).
fn case(fake: &Fake, tool_config: &str, grant: &str) -> Case {
    case_within(fake, tool_config, grant, "60s")
}

/// [`case`] with the instance's `grants.deadline`.
fn case_within(fake: &Fake, tool_config: &str, grant: &str, deadline: &str) -> Case {
    let env = TestEnv::new();
    env.plugin(BEDROCK_KB, "bedrock-kb");
    let config = env.config(&format!(
        r#"
[tools.kb]
component = "plugins/bedrock-kb.wasm"
config = {tool_config}
[tools.kb.grants]
deadline = "{deadline}"
bedrock = {{ endpoint = "{}", {grant} }}
"#,
        fake.endpoint
    ));
    Case { env, config }
}

async fn call(c: &Case, args: Value, env: &[(&'static str, String)]) -> Run {
    call_tool(c, "kb.retrieve", args, env).await
}

async fn call_tool(c: &Case, tool: &str, args: Value, env: &[(&'static str, String)]) -> Run {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.arg("--config").arg(&c.config).args(["call", tool, &args.to_string(), "--json"]);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "BEDROCK_KB_ID",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str()))).kill_on_drop(true);
    let start = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("quarry call within 2 minutes")
        .unwrap();
    let _ = &c.env;
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

fn crewai_text(run: &Run) -> Value {
    let out = run.json();
    serde_json::from_str(out["text"].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_location_and_content_type_signed_and_recorded() {
    let fake = Fake::start().await;
    let c = case(
        &fake,
        &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_OK),
        &format!(r#"knowledge_bases = ["{}"]"#, fb::KB_OK),
    );
    let run = call(&c, json!({"query": "what is in the docs?"}), &aws_env()).await;
    let out = run.json();
    let text: Value = serde_json::from_str(out["text"].as_str().unwrap()).unwrap();
    let results = text["results"].as_array().unwrap();
    let sources: Vec<(&str, Option<&str>)> =
        results.iter().map(|r| (r["source_type"].as_str().unwrap(), r["source_uri"].as_str())).collect();
    assert_eq!(
        sources,
        vec![
            ("S3", Some("s3://docs/a.txt")),
            ("WEB", Some("https://example.com/w")),
            ("CONFLUENCE", Some("https://wiki.example.com/c")),
            ("SALESFORCE", Some("https://sf.example.com/s")),
            ("SHAREPOINT", Some("https://sp.example.com/p")),
            ("CUSTOM", Some("custom-1")),
            ("KENDRA", Some("https://kendra.example.com/k")),
            ("SQL", Some("SELECT id, name FROM items")),
            ("ONEDRIVE", Some("https://onedrive.example.com/o")),
            ("GOOGLEDRIVE", Some("https://drive.example.com/g")),
        ]
    );
    assert_eq!(results[0]["content"], "from s3");
    assert_eq!(results[0]["content_type"], "TEXT");
    assert_eq!(results[0]["score"], 0.91);
    assert_eq!(results[0]["metadata"]["year"], 2024);
    assert_eq!(results[7]["content_type"], "ROW");
    assert_eq!(results[7]["row_content"][1], json!({"columnName": "name", "columnValue": "widget", "type": "STRING"}));
    assert_eq!(results[9]["byte_content"], "data:image/png;base64,iVBORw0KGgo=");
    assert_eq!(text["nextToken"], "page-2");
    assert!(text.get("guardrailAction").is_none());
    // CrewAI's key order, as json.dumps(indent=2) writes it.
    assert!(out["text"].as_str().unwrap().starts_with("{\n  \"results\": [\n    {\n      \"content\": \"from s3\",\n      \"content_type\": \"TEXT\",\n      \"source_type\": \"S3\",\n      \"source_uri\": \"s3://docs/a.txt\",\n      \"score\": 0.91,"), "{}", out["text"]);
    // Hits mirror the results.
    assert_eq!(out["hits"].as_array().unwrap().len(), 10);
    assert_eq!(out["hits"][7]["content"], "id: 7\nname: widget");
    assert_eq!(out["hits"][0]["source"], "s3://docs/a.txt");
    assert_eq!(out["extra"]["nextToken"], "page-2");

    // The field names on the wire, as the API model spells them (the SDK adds the query's type).
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert!(req.signed, "the fake could not verify the signature");
    assert_eq!(req.path, format!("/knowledgebases/{}/retrieve", fb::KB_OK));
    assert_eq!(
        req.body,
        json!({"retrievalQuery": {"text": "what is in the docs?", "type": "TEXT"}, "retrievalConfiguration": {"vectorSearchConfiguration": {"numberOfResults": 5}}})
    );
    assert_eq!(req.headers.get("amz-sdk-request").map(String::as_str), Some("attempt=1; max=3"));
    assert!(req.headers["authorization"].contains(&format!("Credential={}/", fb::ACCESS_KEY)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_guardrails_filters_and_per_call_results() {
    let fake = Fake::start().await;
    let c = case(
        &fake,
        &format!(
            r#"{{ knowledge_base_id = "{}", guardrail_configuration = {{ guardrailId = "g1", guardrailVersion = "DRAFT" }} }}"#,
            fb::KB_OK
        ),
        &format!(r#"knowledge_bases = ["{}"]"#, fb::KB_OK),
    );
    let filter = json!({"andAll": [{"equals": {"key": "lang", "value": "en"}}, {"greaterThanOrEquals": {"key": "year", "value": 2020}}]});
    let run =
        call(&c, json!({"query": "q", "next_token": "page-2", "number_of_results": 2, "filter": filter}), &aws_env())
            .await;
    let text = crewai_text(&run);
    assert_eq!(text["results"].as_array().unwrap().len(), 1);
    assert_eq!(text["results"][0]["content"], "second page");
    assert!(text.get("nextToken").is_none(), "the last page has no token");
    assert_eq!(text["guardrailAction"], "INTERVENED");
    // A knowledge-base ARN works where the API takes one: it travels percent-encoded in the
    // path, which the signature covers encoded once more.
    let arn = format!("arn:aws:bedrock:us-east-1:123456789012:knowledge-base/{}", fb::KB_EMPTY);
    let by_arn =
        case(&fake, &format!(r#"{{ knowledge_base_id = "{arn}" }}"#), &format!(r#"knowledge_bases = ["{arn}"]"#));
    let text = crewai_text(&call(&by_arn, json!({"query": "q"}), &aws_env()).await);
    assert_eq!(text, json!({"message": "No results found for the given query."}));
    let last = fake.seen().pop().unwrap();
    assert!(last.signed && last.path.contains("arn%3Aaws%3Abedrock"), "{}", last.path);

    let body = &fake.seen()[0].body;
    assert_eq!(
        body,
        &json!({
            "retrievalQuery": {"text": "q", "type": "TEXT"},
            "retrievalConfiguration": {"vectorSearchConfiguration": {"numberOfResults": 2, "filter": filter}},
            "guardrailConfiguration": {"guardrailId": "g1", "guardrailVersion": "DRAFT"},
            "nextToken": "page-2"
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_and_wrong_region_are_refused_by_the_signature_check() {
    let fake = Fake::start().await;
    let c = case(&fake, &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_OK), r#"knowledge_bases = ["*"]"#);
    let mut env = aws_env();
    env[1].1 = "not-the-secret".into();
    let run = call(&c, json!({"query": "q"}), &env).await;
    assert_eq!(run.code, Some(1));
    assert!(
        run.error().contains("Error (InvalidSignatureException): The request signature we calculated does not match"),
        "{}",
        run.error()
    );
    assert!(!fake.seen()[0].signed);

    // An empty AWS_REGION is unset: AWS_DEFAULT_REGION is next.
    let mut env = aws_env();
    env[2].1 = String::new();
    env.push(("AWS_DEFAULT_REGION", fb::REGION.into()));
    assert_eq!(call(&c, json!({"query": "q"}), &env).await.code, Some(0));
    // Another region signs for another scope, which the fake refuses.
    let mut env = aws_env();
    env[2].1 = "eu-west-1".into();
    let run = call(&c, json!({"query": "q"}), &env).await;
    assert!(run.error().contains("InvalidSignatureException"), "{}", run.error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_and_errors_keep_crewais_wording() {
    let fake = Fake::start().await;
    let c = case(&fake, &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_THROTTLED), r#"knowledge_bases = ["*"]"#);
    let text = crewai_text(&call(&c, json!({"query": "q"}), &aws_env()).await);
    assert_eq!(text["results"].as_array().unwrap().len(), 10);
    let attempts: Vec<String> = fake.seen().iter().map(|s| s.headers["amz-sdk-request"].clone()).collect();
    assert_eq!(attempts.len(), 3, "two 429s, then success: {attempts:?}");
    for (i, a) in attempts.iter().enumerate() {
        assert!(a.starts_with(&format!("attempt={}; max=3", i + 1)), "{a}");
    }

    for (kb, expected) in [
        (
            fb::KB_MISSING_HEADER,
            format!("Error (ResourceNotFoundException): Knowledge base {} does not exist", fb::KB_MISSING_HEADER),
        ),
        (fb::KB_INVALID_TYPE, "Error (ValidationException): numberOfResults is too large".to_string()),
        (fb::KB_DENIED_CODE, "Error (AccessDeniedException): not authorized to retrieve".to_string()),
        (fb::KB_BROKEN, "Error (InternalServerException): internal failure".to_string()),
        (fb::KB_BAD_GATEWAY_TYPE, "Error (BadGatewayException): upstream model failed".to_string()),
        (fb::KB_BROKEN_CODE, "Error (InternalServerException): internal failure (code)".to_string()),
    ] {
        let c = case(
            &fake,
            &format!(r#"{{ knowledge_base_id = "{kb}" }}"#),
            r#"knowledge_bases = ["*"], max_attempts = 2"#,
        );
        let run = call(&c, json!({"query": "q"}), &aws_env()).await;
        assert_eq!(run.error(), format!("error: kb.retrieve: upstream: {expected}"));
    }
    for kb in [fb::KB_BROKEN, fb::KB_BAD_GATEWAY_TYPE, fb::KB_BROKEN_CODE] {
        let n = fake.seen().iter().filter(|s| s.path.contains(kb)).count();
        assert_eq!(n, 2, "{kb}: a 5xx is retried up to max_attempts");
    }
    let missing = fake.seen().iter().filter(|s| s.path.contains(fb::KB_MISSING_HEADER)).count();
    assert_eq!(missing, 1, "a 404 is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_times_out() {
    let fake = Fake::start().await;
    let c = case(
        &fake,
        &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_SLOW),
        r#"knowledge_bases = ["*"], max_attempts = 1, attempt_timeout = "1s", timeout = "2s""#,
    );
    let run = call(&c, json!({"query": "q"}), &aws_env()).await;
    assert!(
        run.error().contains("upstream: Unexpected error:") && run.error().contains("timed out"),
        "{}",
        run.error()
    );
    assert!(run.took < Duration::from_secs(15), "took {:?}", run.took);

    // With no timeouts given, the call still ends inside a short deadline as Bedrock's timeout,
    // not as a missed deadline that recycles the instance.
    let c = case_within(
        &fake,
        &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_SLOW),
        r#"knowledge_bases = ["*"]"#,
        "3s",
    );
    let run = call(&c, json!({"query": "q"}), &aws_env()).await;
    assert!(
        run.error().contains("upstream: Unexpected error:") && run.error().contains("timed out"),
        "{}",
        run.error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_limits_knowledge_bases_and_the_environment_names_the_default() {
    let fake = Fake::start().await;
    let c =
        case(&fake, &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_OK), r#"knowledge_bases = ["OTHERKB001"]"#);
    let run = call(&c, json!({"query": "q"}), &aws_env()).await;
    assert!(
        run.error()
            .contains("denied: knowledge base \"KBOK000001\" is not in this instance's grants.bedrock.knowledge_bases"),
        "{}",
        run.error()
    );
    assert!(fake.seen().is_empty(), "nothing may reach Bedrock");

    // No knowledge_base_id in the config: BEDROCK_KB_ID from the host's environment.
    let c = case(&fake, "{}", r#"knowledge_bases = ["*"]"#);
    let mut env = aws_env();
    env.push(("BEDROCK_KB_ID", fb::KB_EMPTY.into()));
    let text = crewai_text(&call(&c, json!({"query": "q"}), &env).await);
    assert_eq!(text, json!({"message": "No results found for the given query."}));
    // Without it, the instance does not load, with CrewAI's message.
    let run = call(&c, json!({"query": "q"}), &aws_env()).await;
    assert!(run.stderr.contains("Parameter validation failed: knowledge_base_id cannot be empty"), "{}", run.stderr);
}

/// Opt-in: a real knowledge base on AWS. Set QUARRY_TEST_BEDROCK_KB_ID (and AWS credentials and
/// region the usual way) to run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_aws_opt_in() {
    let Some(kb) = std::env::var("QUARRY_TEST_BEDROCK_KB_ID").ok().filter(|v| !v.is_empty()) else {
        eprintln!(
            "skipped: set QUARRY_TEST_BEDROCK_KB_ID (and AWS credentials) to query a real Bedrock knowledge base"
        );
        return;
    };
    let env = TestEnv::new();
    env.plugin(BEDROCK_KB, "bedrock-kb");
    let config = env.config(&format!(
        "[tools.kb]\ncomponent = \"plugins/bedrock-kb.wasm\"\nconfig = {{ knowledge_base_id = \"{kb}\" }}\n[tools.kb.grants]\ndeadline = \"60s\"\nbedrock = {{ knowledge_bases = [\"{kb}\"] }}\n"
    ));
    let out = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&config)
        .args(["call", "kb.retrieve", r#"{"query": "What is this knowledge base about?"}"#, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text: Value = serde_json::from_str(v["text"].as_str().unwrap()).unwrap();
    assert!(text.get("results").is_some() || text.get("message").is_some(), "{text}");
}

/// A hostile component granted one knowledge base by id and one account's knowledge bases by an
/// ARN pattern: other accounts' and regions' ARNs that end in the granted id, identifiers that
/// are paths, and oversized bodies are all refused before anything reaches Bedrock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arns_are_granted_exactly_and_bodies_are_bounded() {
    let fake = Fake::start().await;
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let mine = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base";
    let config = env.config(&format!(
        r#"
[tools.h]
component = "plugins/hostile.wasm"
[tools.h.grants]
deadline = "60s"
bedrock = {{ endpoint = "{}", knowledge_bases = ["{}", "{mine}/*"] }}
"#,
        fake.endpoint,
        fb::KB_OK
    ));
    let c = Case { env, config };
    let refused = [
        (format!("arn:aws:bedrock:us-east-1:999999999999:knowledge-base/{}", fb::KB_OK), "denied: knowledge base"),
        (format!("arn:aws:bedrock:eu-west-1:123456789012:knowledge-base/{}", fb::KB_OK), "denied: knowledge base"),
        (format!("arn:aws-cn:bedrock:us-east-1:123456789012:knowledge-base/{}", fb::KB_OK), "denied: knowledge base"),
        (format!("{}/../../x", fb::KB_OK), "is not a knowledge-base id"),
        ("../../knowledgebases/OTHER00001".to_string(), "is not a knowledge-base id"),
        (format!("{mine}/*"), "is a pattern"),
    ];
    for (kb, want) in &refused {
        let run = call_tool(&c, "h.bedrock", json!({"kb": kb}), &aws_env()).await;
        assert!(run.error().contains(want), "{kb}: {}", run.error());
    }
    // Over the 64 KiB a Retrieve body may be, under the 128 KiB one command-line argument may be.
    let huge = format!("[{}0]", "0,".repeat(40_000));
    let run = call_tool(&c, "h.bedrock", json!({"kb": fb::KB_OK, "request": huge}), &aws_env()).await;
    assert!(run.error().contains("over the limit of 65536 bytes"), "{}", run.error());
    assert!(fake.seen().is_empty(), "nothing may reach Bedrock: {:?}", fake.seen().len());

    // What the grant names goes through: the id, and an ARN of the granted account.
    for kb in [fb::KB_OK.to_string(), format!("{mine}/{}", fb::KB_EMPTY)] {
        let run = call_tool(&c, "h.bedrock", json!({"kb": kb}), &aws_env()).await;
        let text: Value = serde_json::from_str(run.json()["text"].as_str().unwrap()).unwrap();
        assert!(text.get("retrievalResults").is_some(), "{kb}: {text}");
    }
    assert_eq!(fake.seen().len(), 2);
}

/// A response body is read into the host before it is parsed: past `max_output` it is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_response_stops_at_the_output_grant() {
    let fake = Fake::start().await;
    let c = case(
        &fake,
        &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_HUGE),
        r#"knowledge_bases = ["*"], max_attempts = 1"#,
    );
    let config = std::fs::read_to_string(&c.config)
        .unwrap()
        .replace("[tools.kb.grants]", "[tools.kb.grants]\nmax_output = \"1MiB\"");
    std::fs::write(&c.config, config).unwrap();
    let run = call(&c, json!({"query": "q"}), &aws_env()).await;
    assert!(run.error().contains("length limit exceeded"), "{}", run.error());
    let c = case(&fake, &format!(r#"{{ knowledge_base_id = "{}" }}"#, fb::KB_OK), r#"knowledge_bases = ["*"]"#);
    assert!(crewai_text(&call(&c, json!({"query": "q"}), &aws_env()).await)["results"].is_array());
}
