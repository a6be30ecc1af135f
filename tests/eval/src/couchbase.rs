//! `--couchbase`: each manual's corpus kept in a Couchbase collection, through the host's own
//! Couchbase backend ([`CouchbaseCorpus`]), so that the chapter RAG's scores on it can be
//! compared with the local backend's. The cluster is named by `QUARRY_EVAL_COUCHBASE`, the JSON
//! line `fake-couchbase` prints (`connection_string`, `username`, `password`, `bucket`,
//! `scope`); the collection is the manual's name.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quarry_corpus::couchbase::{CouchbaseCorpus, Lease};
use quarry_corpus::{Change, Filter, Found, Info, Record, Shape};
use rag_core::corpus::{Corpus, CorpusError, Writer};
use serde_json::Value;

/// Where the corpora go: a cluster, a bucket and a scope, and the runtime the SDK runs on.
pub struct Cluster {
    runtime: tokio::runtime::Runtime,
    connection: Arc<quarry_couchbase::Connection>,
    bucket: String,
    scope: String,
}

impl Cluster {
    /// The cluster `QUARRY_EVAL_COUCHBASE` names.
    pub fn from_env() -> Result<Cluster> {
        if std::env::var_os("RUST_LOG").is_some() {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_writer(std::io::stderr)
                .init();
        }
        let text = std::env::var("QUARRY_EVAL_COUCHBASE").context(
            "--couchbase: set QUARRY_EVAL_COUCHBASE to the JSON line fake-couchbase prints (make eval-couchbase does)",
        )?;
        let mut v: Value = serde_json::from_str(&text).context("QUARRY_EVAL_COUCHBASE is not JSON")?;
        let field = |v: &mut Value, k: &str| -> Result<String> {
            let o = v.as_object_mut().context("QUARRY_EVAL_COUCHBASE is not a JSON object")?;
            o.remove(k)
                .and_then(|x| x.as_str().map(str::to_string))
                .with_context(|| format!("QUARRY_EVAL_COUCHBASE has no {k:?}"))
        };
        let (bucket, scope) = (field(&mut v, "bucket")?, field(&mut v, "scope")?);
        let raw: quarry_couchbase::RawConnection = serde_json::from_value(v).context("QUARRY_EVAL_COUCHBASE")?;
        let connection = quarry_couchbase::connection(std::path::Path::new("/"), raw)
            .map_err(|e| anyhow::anyhow!("QUARRY_EVAL_COUCHBASE: {e:?}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        Ok(Cluster { runtime, connection: Arc::new(connection), bucket, scope })
    }

    /// Corpus `name` in the collection of that name, for vectors of `shape`.
    pub fn open(self: &Arc<Self>, name: &str, shape: Shape) -> Result<Rc<dyn Corpus>, CorpusError> {
        let store = quarry_couchbase::store::Store::new(
            self.connection.clone(),
            &self.bucket,
            &self.scope,
            name,
            Duration::from_secs(30),
        );
        let corpus = self.runtime.block_on(CouchbaseCorpus::open(name, store, &format!("quarry-{name}"), shape))?;
        Ok(Rc::new(Kept { cluster: self.clone(), corpus: Arc::new(corpus) }))
    }
}

/// A corpus in the cluster, called from the evaluation's own thread.
struct Kept {
    cluster: Arc<Cluster>,
    corpus: Arc<CouchbaseCorpus>,
}

impl Kept {
    fn run<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.cluster.runtime.block_on(f)
    }
}

impl Corpus for Kept {
    fn info(&self) -> Result<Info, CorpusError> {
        self.run(self.corpus.info())
    }
    fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError> {
        self.run(self.corpus.nearest(vector, k, filter))
    }
    fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError> {
        self.run(self.corpus.keyword(query, similar_to, k, filter))
    }
    fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        self.run(self.corpus.get(ids))
    }
    fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>, CorpusError> {
        self.run(self.corpus.list(filter, offset, limit))
    }
    fn write(&self) -> Result<Box<dyn Writer + '_>, CorpusError> {
        let lease = self.run(self.corpus.lease("chapter-eval", Duration::from_secs(60), Duration::from_secs(60)))?;
        Ok(Box::new(Batch { kept: self, lease, changes: Vec::new(), notes: None }))
    }
}

/// A batch under the lease, committed whole.
struct Batch<'a> {
    kept: &'a Kept,
    lease: Lease,
    changes: Vec<Change>,
    notes: Option<String>,
}

impl Writer for Batch<'_> {
    fn upsert(&mut self, records: Vec<Record>) -> Result<(), CorpusError> {
        self.changes.extend(records.into_iter().map(Change::Upsert));
        Ok(())
    }
    fn remove(&mut self, ids: Vec<String>) -> Result<(), CorpusError> {
        self.changes.extend(ids.into_iter().map(Change::Remove));
        Ok(())
    }
    fn set_notes(&mut self, notes: String) -> Result<(), CorpusError> {
        self.notes = Some(notes);
        Ok(())
    }
    fn commit(self: Box<Self>) -> Result<u64, CorpusError> {
        let Batch { kept, lease, changes, notes } = *self;
        let generation = kept.run(kept.corpus.commit(&lease, changes, notes));
        // The lease's renewal task runs on the runtime: given back there.
        kept.run(async move { drop(lease) });
        generation
    }
}
