//! Embedder components: an `[embedders.NAME]` component run as a pool of instances, each in its
//! own sandbox ([`ComponentEmbedder`]), held in an [`EmbedderSlot`] so that it can be hot-swapped
//! without reopening the tools it serves. This is the backend of the `embedder` capability
//! ([`crate::capability::embedder`]) today.

use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::Store;
use wasmtime::component::Linker;

use crate::bindings::embedder_world::exports::quarry::retrieval::embedder as ex;
use crate::bindings::embedder_world::{EmbedderHost, EmbedderHostPre};
use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo, TokenSpan};
use crate::capability::CallCx;
use crate::capability::embedder::{BoxFuture, EmbedCaller, EmbedderBackend, MAX_CHUNK};
use crate::config::InstanceConfig;
use crate::registry::errors::OpenError;
use crate::registry::version::{Compiled, compile};
use crate::runtime::engine::QuarryEngine;
use crate::runtime::guarded::{GuestCall, new_store, run_guarded, run_guarded_for};
use crate::runtime::pool::StorePool;
use crate::runtime::store::StoreState;

/// An embedder component: a pool of instances, each in its own store, each
/// having run `model.load(config)`. A batch is split into contiguous chunks of at
/// most [`MAX_CHUNK`] texts, [`PARTS_PER_MEMBER`] per instance, run in parallel on the
/// pool as its members come free, so ingest uses every core;
/// the pool ([`StorePool`]) serves its callers (tool instances) in turn, so one tool's
/// ingest delays another tool's query by at most one chunk per member.
/// Faults recycle the instance that had them, and so does a chunk whose caller gave
/// up part-way (its task is aborted).
pub struct ComponentEmbedder {
    config: Arc<InstanceConfig>,
    engine: QuarryEngine,
    pre: EmbedderHostPre<StoreState>,
    /// Keeps the compiled component in the engine's memory while this version serves.
    _component: Arc<wasmtime::component::Component>,
    info: ModelInfo,
    /// SHA-256 of the component version.
    pub hash: [u8; 32],
    pool: StorePool<Live>,
}

struct Live {
    store: Store<StoreState>,
    /// Shared with each call's future, which must own what it uses.
    bindings: Arc<EmbedderHost>,
}

/// Below this many texts per instance, a batch is not worth splitting.
const MIN_CHUNK: usize = 4;
/// Parts a batch is split into per pool member. Texts differ in length, so equal halves end
/// apart and the member that ends first would wait for the other; smaller parts go to whichever
/// member is free. `make bench-docx`'s q8 run (2 cores, the rclone DOCX's batches of 32): one
/// part per member ingested in 39.2 s, four in 38.0 s.
const PARTS_PER_MEMBER: usize = 4;
/// The most texts one member tokenises for a caller before the next caller's turn.
const MAX_TOKENISE_PART: usize = 256;

/// The answer for one part of a batch split over the pool.
type PartCall<T> = BoxFuture<'static, Result<Vec<T>, EmbedError>>;

impl ComponentEmbedder {
    /// Compiles the embedder configured by `config` and starts its pool
    /// (`config.pool` instances, loaded concurrently).
    pub async fn open(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        config: Arc<InstanceConfig>,
    ) -> Result<ComponentEmbedder, OpenError> {
        let compiled = compile(engine, &config.component).await?;
        Self::from_compiled(engine, linker, config, compiled).await
    }

    /// [`ComponentEmbedder::open`] with its component already read and compiled.
    pub(crate) async fn from_compiled(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        config: Arc<InstanceConfig>,
        compiled: Compiled,
    ) -> Result<ComponentEmbedder, OpenError> {
        let path = &config.component;
        let Compiled { component, hash, version } = compiled;
        let link = |message: String| OpenError::Link { path: path.clone(), message };
        let pre = linker.instantiate_pre(&component).map_err(|e| link(format!("{e:#}")))?;
        let pre = EmbedderHostPre::new(pre).map_err(|e| {
            link(format!(
                "{e:#} (an embedder component must export `quarry:retrieval/model` and `quarry:retrieval/embedder`; see wit/)"
            ))
        })?;
        let size = config.pool.max(1);
        let mut tasks = Vec::with_capacity(size);
        for _ in 0..size {
            let (engine, config, pre) = (engine.clone(), config.clone(), pre.clone());
            tasks.push(tokio::spawn(async move { start(&engine, &config, &pre).await }));
        }
        let mut members = Vec::with_capacity(size);
        let mut info = None;
        for t in tasks {
            let (live, i) = t.await.map_err(|e| link(format!("loader task failed: {e}")))??;
            info.get_or_insert(i);
            members.push(live);
        }
        let info = info.ok_or_else(|| link("empty pool".into()))?;
        tracing::info!(target: "quarry::embedder", embedder = %config.name, pool = size, model = %info.id,
            version = version.as_deref().unwrap_or("none"), "embedder ready");
        let pool = StorePool::ready(members);
        Ok(ComponentEmbedder { config, engine: engine.clone(), pre, _component: component, info, hash, pool })
    }

    /// Embeds `texts` for `client`, whose call must end by `deadline`, splitting a large batch
    /// over the pool (see the type docs).
    pub async fn embed_batch(
        self: Arc<Self>,
        client: String,
        deadline: Option<Instant>,
        texts: Vec<String>,
        kind: InputKind,
    ) -> Result<Vec<Embedding>, EmbedError> {
        let run = move |me: Arc<Self>, client: String, part: Vec<String>| -> PartCall<Embedding> {
            Box::pin(async move { me.run_on(&client, deadline, part, kind).await })
        };
        self.split(client, texts, MAX_CHUNK, run).await
    }

    /// Runs `run` over `texts` in parts of at most `max_part` texts, in parallel on the pool,
    /// and joins the answers in order. Each part runs on its own worker thread; dropping the
    /// set (the caller gave up) aborts the parts, and each aborted part drops its member's store.
    async fn split<T: Send + 'static>(
        self: Arc<Self>,
        client: String,
        texts: Vec<String>,
        max_part: usize,
        run: impl Fn(Arc<Self>, String, Vec<String>) -> PartCall<T> + Clone + Send + 'static,
    ) -> Result<Vec<T>, EmbedError> {
        let n = self.pool.len();
        if texts.len() <= max_part && (n == 1 || texts.len() < 2 * MIN_CHUNK) {
            let count = texts.len();
            let me = self.clone();
            return me.one_per_text(count, run(self, client, texts).await?);
        }
        let part = texts.len().div_ceil(n * PARTS_PER_MEMBER).clamp(MIN_CHUNK, max_part);
        let mut tasks = tokio::task::JoinSet::new();
        let mut rest = texts;
        let mut sizes = Vec::new();
        while !rest.is_empty() {
            let tail = rest.split_off(part.min(rest.len()));
            let texts = std::mem::replace(&mut rest, tail);
            let (i, me, client, run) = (sizes.len(), self.clone(), client.clone(), run.clone());
            sizes.push(texts.len());
            tasks.spawn(async move { (i, run(me, client, texts).await) });
        }
        let mut parts: Vec<Option<Vec<T>>> = sizes.iter().map(|_| None).collect();
        while let Some(done) = tasks.join_next().await {
            let (i, part) = done.map_err(|e| EmbedError::Internal(format!("embedder task failed: {e}")))?;
            parts[i] = Some(self.one_per_text(sizes[i], part?)?);
        }
        Ok(parts.into_iter().flatten().flatten().collect())
    }

    /// `answers` for `texts` texts, refused unless there is one per text: parts are joined in
    /// order, so a part that answered too few or too many would shift every answer after it.
    fn one_per_text<T>(&self, texts: usize, answers: Vec<T>) -> Result<Vec<T>, EmbedError> {
        if answers.len() != texts {
            return Err(EmbedError::Internal(format!(
                "embedder {:?} answered {} results for {texts} texts; it is faulty",
                self.config.name,
                answers.len()
            )));
        }
        Ok(answers)
    }

    async fn run_on(
        &self,
        client: &str,
        deadline: Option<Instant>,
        texts: Vec<String>,
        kind: InputKind,
    ) -> Result<Vec<Embedding>, EmbedError> {
        let kind = match kind {
            InputKind::Query => ex::InputKind::Query,
            InputKind::Document => ex::InputKind::Document,
        };
        let out = self
            .on_member(client, deadline, move |store, bindings| {
                Box::pin(async move { bindings.quarry_retrieval_embedder().call_embed(store, &texts, kind).await })
            })
            .await?;
        // Checked as each part arrives, before the parts of a batch are held together: a
        // vector of another width than the model's is a faulty (or hostile) embedder.
        let dimension = self.info.dimension as usize;
        if let Some(bad) = out.iter().find(|e| e.vector.len() != dimension) {
            return Err(EmbedError::Internal(format!(
                "embedder {:?} answered a vector of {} dimensions for a model of {dimension}; it is faulty",
                self.config.name,
                bad.vector.len()
            )));
        }
        Ok(out.into_iter().map(|e| Embedding { vector: e.vector, truncated: e.truncated }).collect())
    }

    /// Counts tokens, split over the pool like [`ComponentEmbedder::embed_batch`] (a manual's
    /// chunks take seconds to tokenise in one instance).
    pub async fn count_tokens(
        self: Arc<Self>,
        client: String,
        deadline: Option<Instant>,
        texts: Vec<String>,
    ) -> Result<Vec<u32>, EmbedError> {
        let run = move |me: Arc<Self>, client: String, part: Vec<String>| -> PartCall<u32> {
            Box::pin(async move {
                me.on_member(&client, deadline, move |store, bindings| {
                    Box::pin(async move { bindings.quarry_retrieval_embedder().call_count_tokens(store, &part).await })
                })
                .await
            })
        };
        self.split(client, texts, MAX_TOKENISE_PART, run).await
    }

    /// The byte spans of each text's tokens, split over the pool like
    /// [`ComponentEmbedder::count_tokens`], checked with [`check_spans`] before a tool sees them.
    pub async fn token_spans(
        self: Arc<Self>,
        client: String,
        deadline: Option<Instant>,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<TokenSpan>>, EmbedError> {
        let name = self.config.name.clone();
        let run = move |me: Arc<Self>, client: String, part: Vec<String>| -> PartCall<Vec<TokenSpan>> {
            let name = name.clone();
            Box::pin(async move {
                let lens: Vec<usize> = part.iter().map(String::len).collect();
                let out = me
                    .on_member(&client, deadline, move |store, bindings| {
                        Box::pin(
                            async move { bindings.quarry_retrieval_embedder().call_token_spans(store, &part).await },
                        )
                    })
                    .await?;
                let out: Vec<Vec<TokenSpan>> = out
                    .into_iter()
                    .map(|spans| spans.into_iter().map(|s| TokenSpan { start: s.start, end: s.end }).collect())
                    .collect();
                // Checked as each part arrives, before the parts are held together.
                check_spans(&name, &lens, &out)?;
                Ok(out)
            })
        };
        self.split(client, texts, MAX_TOKENISE_PART, run).await
    }

    /// Runs one export call on the next pool member `client` is given (restarting it if a
    /// fault recycled it), bounded by the embedder's deadline; a fault recycles the member.
    /// With the caller's `deadline`, the call waits for a member only until then, and the
    /// member's inference (wasi-nn) runs in `client`'s turn and within that deadline too.
    async fn on_member<T>(
        &self,
        client: &str,
        deadline: Option<Instant>,
        call: impl for<'a> FnOnce(&'a mut Store<StoreState>, Arc<EmbedderHost>) -> GuestCall<'a, Result<T, ex::EmbedError>>,
    ) -> Result<T, EmbedError> {
        let name = &self.config.name;
        let mut lease = self.pool.lease_until(client, deadline).await.ok_or_else(|| {
            EmbedError::Unavailable(format!(
                "the call's deadline passed while it waited for embedder {name:?}; raise the tool's `deadline` or embed less at once"
            ))
        })?;
        let restart = async { start(&self.engine, &self.config, &self.pre).await.map(|(live, _)| live) };
        let mut live = lease
            .take_or_start(restart)
            .await
            .map_err(|e| EmbedError::Unavailable(format!("embedder {name:?} cannot restart: {e}")))?;
        let bindings = live.bindings.clone();
        let cx = CallCx { for_caller: deadline.map(|d| (client, d)), tool_code: false };
        let outcome =
            run_guarded_for(&mut live.store, self.config.grants.deadline, cx, |store| call(store, bindings)).await;
        // Logged as they happened; kept only for a tool's error message, which an embed has not.
        let _ = live.store.data().take_refusals();
        match outcome {
            Err(fault) => {
                lease.faulted(&format!("embedder {name:?}"), &fault);
                Err(EmbedError::Unavailable(format!("embedder {name:?} {fault}; it was recycled")))
            }
            Ok(result) => {
                lease.put_back(live);
                result.map_err(|e| match e {
                    ex::EmbedError::InvalidInput(m) => EmbedError::InvalidInput(m),
                    ex::EmbedError::Unavailable(m) => EmbedError::Unavailable(m),
                    ex::EmbedError::Internal(m) => EmbedError::Internal(m),
                })
            }
        }
    }

    /// The model's identity.
    pub fn info(&self) -> ModelInfo {
        self.info.clone()
    }
}

/// Instantiates an embedder and runs `model.load(config)`.
async fn start(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    pre: &EmbedderHostPre<StoreState>,
) -> Result<(Live, ModelInfo), OpenError> {
    let name = config.name.clone();
    let fault = |fault| OpenError::Fault { instance: name.clone(), fault };
    let mut store =
        new_store(engine, config, None).map_err(|source| OpenError::Sandbox { instance: name.clone(), source })?;
    let deadline = config.grants.deadline;
    let pre = pre.clone();
    let bindings =
        run_guarded(&mut store, deadline, |store| Box::pin(async move { pre.instantiate_async(store).await }))
            .await
            .map(Arc::new)
            .map_err(fault)?;
    let (b, json) = (bindings.clone(), config.config_json.clone());
    let loaded = run_guarded(&mut store, deadline, |store| {
        Box::pin(async move { b.quarry_retrieval_model().call_load(store, &json).await })
    })
    .await
    .map_err(fault)?;
    match loaded {
        Ok(i) => Ok((
            Live { store, bindings },
            ModelInfo {
                id: crate::support::text::cut(&i.id, MAX_MODEL_ID),
                dimension: i.dimension,
                max_tokens: i.max_tokens,
            },
        )),
        Err(e) => {
            let reason = match e {
                ex::EmbedError::InvalidInput(m) | ex::EmbedError::Unavailable(m) | ex::EmbedError::Internal(m) => m,
            };
            Err(OpenError::ModelRejected {
                instance: name.clone(),
                reason: crate::support::text::cut(&reason, 4 << 10),
            })
        }
    }
}

/// Serves a tool's embedder import from whichever version of an embedder is
/// current, so an embedder can be swapped without reopening its tools.
pub struct EmbedderSlot {
    current: RwLock<Arc<ComponentEmbedder>>,
}

impl EmbedderSlot {
    /// A slot serving `e`.
    pub fn new(e: ComponentEmbedder) -> Self {
        EmbedderSlot { current: RwLock::new(Arc::new(e)) }
    }

    /// The version serving now.
    pub fn current(&self) -> Arc<ComponentEmbedder> {
        self.current.read().clone()
    }

    /// Replaces the serving version; calls in flight finish on the old one.
    pub fn replace(&self, e: ComponentEmbedder) {
        *self.current.write() = Arc::new(e);
    }
}

impl EmbedderBackend for EmbedderSlot {
    fn info(&self) -> ModelInfo {
        self.current().info()
    }

    fn embed_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
        kind: InputKind,
    ) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>> {
        Box::pin(self.current().embed_batch(caller.client.to_string(), caller.deadline, texts, kind))
    }

    fn count_tokens_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>> {
        let (current, client, deadline) = (self.current(), caller.client.to_string(), caller.deadline);
        Box::pin(current.count_tokens(client, deadline, texts))
    }

    fn token_spans_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<TokenSpan>>, EmbedError>> {
        let (current, client, deadline) = (self.current(), caller.client.to_string(), caller.deadline);
        Box::pin(current.token_spans(client, deadline, texts))
    }
}

/// Checks an embedder's `token-spans` answer for texts of byte lengths `lens`: one list per
/// text, each span inside its text, spans in order. A tool sizes chunks by binary search over
/// the spans, so a faulty tokenizer is stopped here rather than sizing chunks wrongly.
/// The longest model id kept (an embedder names its model; the host keeps the name for the
/// life of the embedder and shows it in logs and `quarry list`).
const MAX_MODEL_ID: usize = 256;

/// Spans a text may have beyond one per byte: the special tokens (`[CLS]`, `[SEP]`, ...) that
/// a tokenizer adds with empty spans.
const MAX_EMPTY_SPANS: usize = 16;

fn check_spans(embedder: &str, lens: &[usize], spans: &[Vec<TokenSpan>]) -> Result<(), EmbedError> {
    let fault = |what: String| {
        EmbedError::Internal(format!("embedder {embedder:?} answered token spans that {what}; its tokenizer is faulty"))
    };
    if spans.len() != lens.len() {
        return Err(fault(format!("cover {} texts of {}", spans.len(), lens.len())));
    }
    for (i, (text, &len)) in spans.iter().zip(lens).enumerate() {
        // A token covers at least one byte, but for the few special tokens a tokenizer adds
        // with empty spans: more spans than that is a tokenizer making up tokens.
        if text.len() > len.saturating_add(MAX_EMPTY_SPANS) {
            return Err(fault(format!("number {} for text {i} of {len} bytes", text.len())));
        }
        let mut last = 0;
        for s in text {
            if s.start > s.end || s.end as usize > len {
                return Err(fault(format!("fall outside text {i} ({}..{} of {len} bytes)", s.start, s.end)));
            }
            if s.start < last {
                return Err(fault(format!("are out of order in text {i}")));
            }
            last = s.start;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(v: &[(u32, u32)]) -> Vec<TokenSpan> {
        v.iter().map(|&(start, end)| TokenSpan { start, end }).collect()
    }

    /// Good spans pass (empty texts, tokens sharing a start); a missing list, a span past its
    /// text or backwards, and spans out of order are faults that name the embedder.
    #[test]
    fn spans_are_checked_against_their_texts() {
        let ok = [spans(&[(0, 3), (4, 7), (4, 7)]), spans(&[])];
        check_spans("e", &[7, 0], &ok).unwrap();
        let bad = [
            (vec![7, 0], ok[..1].to_vec(), "cover 1 texts of 2"),
            (vec![5], vec![spans(&[(0, 3), (4, 7)])], "outside text 0 (4..7 of 5 bytes)"),
            (vec![9], vec![spans(&[(5, 3)])], "outside text 0"),
            (vec![9], vec![spans(&[(4, 5), (0, 3)])], "out of order in text 0"),
            (vec![2], vec![spans(&[(0, 0); 100])], "number 100 for text 0 of 2 bytes"),
        ];
        for (lens, got, want) in bad {
            let e = check_spans("e", &lens, &got).unwrap_err().describe();
            assert!(e.contains(want) && e.contains("embedder \"e\""), "{e}");
        }
    }
}
