//! WIT's `corpus` import as rag-core's [`Corpus`]: a corpus the host keeps, shared by every
//! instance that opens it.

use rag_core::corpus::{Clause, Corpus, CorpusError, Filter, Found, Info, Match, Metric, Record, Shape, Writer};

use crate::corpus as wit;

fn from_wit(e: wit::CorpusError) -> CorpusError {
    match e {
        wit::CorpusError::Shape(m) => CorpusError::Shape(m),
        wit::CorpusError::Invalid(m) => CorpusError::Invalid(m),
        wit::CorpusError::Denied(m) => CorpusError::Denied(m),
        wit::CorpusError::Busy(m) => CorpusError::Busy(m),
        wit::CorpusError::Unavailable(m) => CorpusError::Unavailable(m),
    }
}

fn clauses(f: &Filter) -> Vec<wit::Clause> {
    f.0.iter()
        .map(|c: &Clause| wit::Clause {
            field: c.field.clone(),
            values: c.values.clone(),
            how: match c.how {
                Match::Exact => wit::MatchKind::Exact,
                Match::Prefix => wit::MatchKind::Prefix,
            },
        })
        .collect()
}

fn found(f: wit::Found) -> Found {
    Found { id: f.id, score: f.score, similarity: f.similarity }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn records(got: Vec<Option<wit::Chunk>>) -> Vec<Option<Record>> {
    got.into_iter()
        .map(|c| {
            c.map(|c| Record {
                id: c.id,
                text: c.text,
                vector: c.vector,
                metadata: c.metadata,
                fields: c.fields.into_iter().map(|f| (f.name, f.values)).collect(),
            })
        })
        .collect()
}

/// Corpus `name` as the host keeps it, opened for vectors of `shape`.
pub fn open(name: &str, shape: Shape) -> Result<HostCorpus, CorpusError> {
    let metric = match shape.metric {
        Metric::Cosine => wit::Metric::Cosine,
        Metric::Dot => wit::Metric::Dot,
    };
    let shape = wit::Shape { dimension: count(shape.dimension), metric };
    wit::Collection::open(name, shape).map(HostCorpus).map_err(from_wit)
}

/// A host corpus; see [`open`].
pub struct HostCorpus(wit::Collection);

impl Corpus for HostCorpus {
    fn info(&self) -> Result<Info, CorpusError> {
        let i = self.0.info().map_err(from_wit)?;
        Ok(Info { generation: i.generation, chunks: i.chunks, notes: i.notes })
    }

    fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError> {
        Ok(self.0.nearest(vector, count(k), &clauses(filter)).map_err(from_wit)?.into_iter().map(found).collect())
    }

    fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError> {
        let hits = self.0.keyword(query, similar_to, count(k), &clauses(filter)).map_err(from_wit)?;
        Ok(hits.into_iter().map(found).collect())
    }

    fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        Ok(records(self.0.get(ids).map_err(from_wit)?))
    }

    fn get_without_vectors(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        Ok(records(self.0.get_without_vectors(ids).map_err(from_wit)?))
    }

    fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>, CorpusError> {
        self.0.ids(&clauses(filter), count(offset), count(limit)).map_err(from_wit)
    }

    fn write(&self) -> Result<Box<dyn Writer + '_>, CorpusError> {
        Ok(Box::new(HostWriter(self.0.write().map_err(from_wit)?)))
    }
}

struct HostWriter(wit::Writer);

impl Writer for HostWriter {
    fn upsert(&mut self, records: Vec<Record>) -> Result<(), CorpusError> {
        let chunks: Vec<wit::Chunk> = records
            .into_iter()
            .map(|r| wit::Chunk {
                id: r.id,
                text: r.text,
                vector: r.vector,
                metadata: r.metadata,
                fields: r.fields.into_iter().map(|(name, values)| wit::Field { name, values }).collect(),
            })
            .collect();
        self.0.upsert(&chunks).map_err(from_wit)
    }

    fn remove(&mut self, ids: Vec<String>) -> Result<(), CorpusError> {
        self.0.remove(&ids).map_err(from_wit)
    }

    fn set_notes(&mut self, notes: String) -> Result<(), CorpusError> {
        self.0.set_notes(&notes).map_err(from_wit)
    }

    fn commit(self: Box<Self>) -> Result<u64, CorpusError> {
        self.0.commit().map_err(from_wit)
    }
}
