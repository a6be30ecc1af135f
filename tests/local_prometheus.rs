//! A real Prometheus server on loopback (Debian's `prometheus` 2.42), started by
//! tests/metrics/prometheus.sh in a directory of its own and scraping one target every second;
//! stopped when dropped. And [`fetch`], the bare HTTP request the tests of `/metrics` and the
//! probes send.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// What a server answered.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Its `Content-Type`, empty when it has none.
    pub content_type: String,
    /// The body as text.
    pub body: String,
}

/// Sends `method` to `url` (`http://host:port/path?query`), with `Authorization: Bearer
/// <token>` when given, and reads the whole answer, within 30 s.
pub async fn fetch(method: &str, url: &str, token: Option<&str>) -> anyhow::Result<Answer> {
    let uri: hyper::Uri = url.parse()?;
    let authority = uri.authority().ok_or_else(|| anyhow::anyhow!("no host in {url}"))?.to_string();
    let go = async {
        let stream = tokio::net::TcpStream::connect(&authority).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header("host", &authority);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let res = send.send_request(req.body(Full::new(Bytes::new()))?).await?;
        let status = res.status().as_u16();
        let content_type =
            res.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let body = String::from_utf8_lossy(&res.into_body().collect().await?.to_bytes()).into_owned();
        anyhow::Ok(Answer { status, content_type, body })
    };
    tokio::time::timeout(Duration::from_secs(30), go).await.map_err(|_| anyhow::anyhow!("{url}: no answer in 30 s"))?
}

/// A running Prometheus.
pub struct LocalPrometheus {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl LocalPrometheus {
    /// Starts one scraping `http://{target}/metrics` every second (with the bearer `token`, if
    /// any), and waits until it is ready.
    pub async fn start(target: &str, token: Option<&str>) -> LocalPrometheus {
        Self::start_with_rules(target, token, None).await
    }

    /// [`LocalPrometheus::start`], evaluating the alerting rules of file `rules` every second.
    pub async fn start_with_rules(target: &str, token: Option<&str>, rules: Option<&Path>) -> LocalPrometheus {
        let dir = tempfile::tempdir().expect("prometheus dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut args = vec!["serve".to_string(), dir.path().display().to_string(), port.to_string(), target.into()];
        if let Some(t) = token {
            let file = dir.path().join("token");
            std::fs::write(&file, t).expect("write the token file");
            args.push(file.display().to_string());
        }
        let child = Command::new("bash")
            .arg(crate::crate_dir().join("metrics/prometheus.sh"))
            .args(&args)
            .env("RULES", rules.map(Path::as_os_str).unwrap_or_default())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start prometheus");
        let p = LocalPrometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
        let started = Instant::now();
        loop {
            if fetch("GET", &format!("{}/-/ready", p.url), None).await.is_ok_and(|a| a.status == 200) {
                return p;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "prometheus did not become ready on {}", p.url);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The samples of instant query `expr`: `(labels, value)` each.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<(Value, f64)>> {
        let q: String = percent_encoding::utf8_percent_encode(expr, percent_encoding::NON_ALPHANUMERIC).to_string();
        let a = fetch("GET", &format!("{}/api/v1/query?query={q}", self.url), None).await?;
        let v: Value = serde_json::from_str(&a.body)?;
        anyhow::ensure!(v["status"] == "success", "query {expr}: {}", a.body);
        let rows = v["data"]["result"].as_array().cloned().unwrap_or_default();
        rows.into_iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap_or("NaN").parse::<f64>()?;
                Ok((r["metric"].clone(), value))
            })
            .collect()
    }

    /// Waits (at most `secs`) until query `expr` has one sample that `want` accepts; returns it.
    pub async fn wait_for(&self, expr: &str, secs: u64, want: impl Fn(f64) -> bool) -> f64 {
        let started = Instant::now();
        loop {
            let last = match self.query(expr).await {
                Ok(rows) if rows.len() == 1 && want(rows[0].1) => return rows[0].1,
                other => other,
            };
            assert!(
                started.elapsed() < Duration::from_secs(secs),
                "prometheus: {expr} did not reach the value wanted in {secs} s; last answer {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for LocalPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
