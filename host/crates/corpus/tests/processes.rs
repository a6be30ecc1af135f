//! The corpus across processes: writers killed with SIGKILL at any moment leave a whole
//! generation (the database's log rolls a half-done commit back), and two processes writing one corpus keep each other's work. The child
//! processes are this test binary again, running [`writer`] with its orders in the environment.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use quarry_corpus::{Change, Filter, LocalCorpus, Metric, Record, Shape};

const SHAPE: Shape = Shape { dimension: 8, metric: Metric::Cosine };
const DIR: &str = "QUARRY_CORPUS_TEST_DIR";
const PREFIX: &str = "QUARRY_CORPUS_TEST_PREFIX";
const COUNT: &str = "QUARRY_CORPUS_TEST_COUNT";

fn chunk(id: String, i: usize) -> Change {
    let mut vector = vec![0.0; SHAPE.dimension];
    vector[i % SHAPE.dimension] = 1.0;
    Change::Upsert(Record {
        text: format!("chunk {id} ").repeat(400),
        metadata: format!("{{\"i\":{i}}}"),
        fields: BTreeMap::from([("writer".to_string(), vec![id.split('-').next().unwrap_or_default().to_string()])]),
        id,
        vector,
    })
}

/// Not a test on its own: a child's work, run by the tests below with `--ignored`. Commits
/// `COUNT` chunks (or until killed), one per generation, ids `PREFIX-i`.
#[test]
#[ignore = "a child process's work, run by the tests of this file"]
fn writer() {
    let Some(dir) = std::env::var_os(DIR) else { return };
    let prefix = std::env::var(PREFIX).unwrap();
    let count: usize = std::env::var(COUNT).unwrap().parse().unwrap();
    let corpus = LocalCorpus::open(Path::new(&dir), SHAPE).unwrap();
    for i in 0..count {
        corpus.commit(vec![chunk(format!("{prefix}-{i}"), i)], None).unwrap();
    }
}

fn spawn(dir: &Path, prefix: &str, count: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["writer", "--exact", "--ignored", "--quiet", "--test-threads=1"])
        .env(DIR, dir)
        .env(PREFIX, prefix)
        .env(COUNT, count.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Killed at twenty moments during its commits, a writer leaves a corpus whose served
/// generation is whole: opening it says nothing is wrong, the generations only move forward,
/// the one served holds every chunk `w-0` to `w-(len-1)` (one a generation: never part of a
/// commit), and the searches work on it.
#[test]
fn a_kill_at_any_moment_leaves_a_whole_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for round in 0..20u64 {
        // One writer continues the same ids: it starts over at 0 and upserts, so the count
        // is the highest generation's.
        let mut child = spawn(dir.path(), "w", 10_000);
        std::thread::sleep(Duration::from_millis(20 + (round * 37) % 90));
        child.kill().unwrap();
        child.wait().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert!(corpus.warnings().is_empty(), "round {round}: {:?}", corpus.warnings());
        let g = corpus.snapshot().unwrap();
        assert!(g.number() >= last, "round {round}: generation {} after {last}", g.number());
        last = g.number();
        let len = g.len() as usize;
        // Each round's writer starts over at w-0: the corpus holds the longest run so far.
        assert!(len as u64 <= g.number(), "round {round}: {len} chunks in generation {}", g.number());
        let ids: Vec<String> = (0..len).map(|i| format!("w-{i}")).collect();
        assert!(
            g.get(&ids).unwrap().iter().all(Option::is_some),
            "round {round}: generation {} lacks a chunk",
            g.number()
        );
        assert_eq!(g.nearest(&[1.0; 8], 3, &Filter::all()).unwrap().len(), 3.min(len));
        assert_eq!(g.keyword("chunk", None, 3, &Filter::exact("writer", "w")).unwrap().len(), 3.min(len));
    }
    assert!(last > 0, "no commit landed in twenty rounds");
}

/// Two processes writing one corpus at once keep each other's work: six and six make twelve.
#[test]
fn two_processes_keep_each_others_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = spawn(dir.path(), "a", 6);
    let mut b = spawn(dir.path(), "b", 6);
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
    let g = corpus.snapshot().unwrap();
    assert_eq!((g.number(), g.len()), (12, 12));
    for w in ["a", "b"] {
        let only = Filter::exact("writer", w);
        assert_eq!(g.nearest(&[1.0; 8], 12, &only).unwrap().len(), 6, "{w}");
    }
}
