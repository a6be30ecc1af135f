//! Nearest neighbours by cosine: exact (a scan) up to [`EXACT_LIMIT`] vectors, HNSW above.

use instant_distance::{Builder, HnswMap, Point, Search};

/// Up to this many vectors a search scans them all (exact); above it the index builds an HNSW
/// graph. Measured (`cargo bench -p rag-core --bench knn`, k = 100, d = 384, one core of an AMD
/// EPYC): the scan takes 0.6 ms at 10,000 vectors and 2.9 ms at 40,000, while the graph, at
/// instant-distance's defaults, finds only 0.80 and 0.53 of the true top 10 there and takes 7 s
/// and 41 s to build. Below 50,000 the scan is both right and fast enough.
pub const EXACT_LIMIT: usize = 50_000;

/// Why a vector was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("vector has {got} dimensions, the index holds {want}-dimensional vectors")]
pub struct DimensionMismatch {
    /// The index's dimension.
    pub want: usize,
    /// The vector's.
    pub got: usize,
}

#[derive(Clone)]
struct Unit(Vec<f32>);

impl Point for Unit {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - crate::score::dot(&self.0, &other.0)
    }
}

/// L2-normalised vectors of one dimension, each known by its position.
pub struct VectorIndex {
    dimension: usize,
    exact_limit: usize,
    vectors: Vec<f32>,
    graph: Option<HnswMap<Unit, usize>>,
}

impl VectorIndex {
    /// An empty index of `dimension`-dimensional vectors.
    pub fn new(dimension: usize) -> VectorIndex {
        VectorIndex { dimension, exact_limit: EXACT_LIMIT, vectors: Vec::new(), graph: None }
    }

    /// Sets how many vectors are searched exactly before an HNSW graph is built.
    pub fn with_exact_limit(mut self, limit: usize) -> VectorIndex {
        self.exact_limit = limit;
        self
    }

    /// The dimension.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.vectors.len() / self.dimension.max(1)
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// Vector `i`.
    pub fn get(&self, i: usize) -> &[f32] {
        &self.vectors[i * self.dimension..(i + 1) * self.dimension]
    }

    /// Every vector, one after the other.
    pub fn raw(&self) -> &[f32] {
        &self.vectors
    }

    /// Appends a vector; its position is the previous [`len`](Self::len).
    pub fn push(&mut self, v: &[f32]) -> Result<usize, DimensionMismatch> {
        if v.len() != self.dimension {
            return Err(DimensionMismatch { want: self.dimension, got: v.len() });
        }
        self.vectors.extend_from_slice(v);
        self.graph = None;
        Ok(self.len() - 1)
    }

    /// Keeps the vectors for which `keep(position)` holds, in order.
    pub fn retain(&mut self, keep: impl Fn(usize) -> bool) {
        let d = self.dimension.max(1);
        let old = std::mem::take(&mut self.vectors);
        for (i, v) in old.chunks_exact(d).enumerate() {
            if keep(i) {
                self.vectors.extend_from_slice(v);
            }
        }
        self.graph = None;
    }

    /// Builds the HNSW graph when the index is past its exact limit; searching does it too.
    pub fn prepare(&mut self) {
        if self.graph.is_none() && self.len() > self.exact_limit {
            let points: Vec<Unit> =
                self.vectors.chunks_exact(self.dimension.max(1)).map(|v| Unit(v.to_vec())).collect();
            let ids = (0..points.len()).collect();
            self.graph = Some(Builder::default().seed(7).build(points, ids));
        }
    }

    /// The `k` nearest vectors to `query` among those `allowed`, as (position, cosine), best
    /// first. Exact when the index is small or a filter is given.
    pub fn search(
        &mut self,
        query: &[f32],
        k: usize,
        allowed: Option<&dyn Fn(usize) -> bool>,
    ) -> Result<Vec<(usize, f32)>, DimensionMismatch> {
        self.prepare();
        self.nearest(query, k, allowed)
    }

    /// [`VectorIndex::search`] without building the graph first: for an index shared by readers,
    /// [`VectorIndex::prepare`]d once when it was built.
    pub fn nearest(
        &self,
        query: &[f32],
        k: usize,
        allowed: Option<&dyn Fn(usize) -> bool>,
    ) -> Result<Vec<(usize, f32)>, DimensionMismatch> {
        if query.len() != self.dimension {
            return Err(DimensionMismatch { want: self.dimension, got: query.len() });
        }
        match (&self.graph, allowed) {
            (Some(graph), None) => {
                let mut search = Search::default();
                Ok(graph
                    .search(&Unit(query.to_vec()), &mut search)
                    .take(k)
                    .map(|m| (*m.value, 1.0 - m.distance))
                    .collect())
            }
            _ => Ok(self.exact(query, k, allowed)),
        }
    }

    /// The exact answer, by scanning.
    pub fn exact(&self, query: &[f32], k: usize, allowed: Option<&dyn Fn(usize) -> bool>) -> Vec<(usize, f32)> {
        let all: Vec<(usize, f32)> = self
            .vectors
            .chunks_exact(self.dimension.max(1))
            .enumerate()
            .filter(|(i, _)| allowed.is_none_or(|f| f(*i)))
            .map(|(i, v)| (i, crate::score::dot(query, v)))
            .collect();
        crate::score::top_k(all, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random unit vectors.
    fn unit_vectors(n: usize, d: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..d)
                    .map(|_| {
                        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
                    })
                    .collect();
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / n).collect()
            })
            .collect()
    }

    #[test]
    fn exact_finds_the_vector_itself_first() {
        let vs = unit_vectors(50, 16, 1);
        let mut ix = VectorIndex::new(16);
        for v in &vs {
            ix.push(v).unwrap();
        }
        let hits = ix.search(&vs[17], 3, None).unwrap();
        assert_eq!(hits[0].0, 17);
        assert!((hits[0].1 - 1.0).abs() < 1e-5);
        assert!(hits[1].1 <= hits[0].1 && hits[2].1 <= hits[1].1);
        let only_even = |i: usize| i.is_multiple_of(2);
        assert!(ix.search(&vs[17], 5, Some(&only_even)).unwrap().iter().all(|(i, _)| i.is_multiple_of(2)));
    }

    #[test]
    fn hnsw_agrees_with_the_scan() {
        let vs = unit_vectors(1500, 16, 2);
        let mut ix = VectorIndex::new(16).with_exact_limit(500);
        for v in &vs {
            ix.push(v).unwrap();
        }
        let queries = unit_vectors(40, 16, 3);
        let mut found = 0;
        for q in &queries {
            let want: Vec<usize> = ix.exact(q, 10, None).into_iter().map(|h| h.0).collect();
            let got = ix.search(q, 10, None).unwrap();
            assert!(ix.graph.is_some());
            found += got.iter().filter(|h| want.contains(&h.0)).count();
        }
        let recall = found as f64 / (40.0 * 10.0);
        assert!(recall >= 0.9, "HNSW recall@10 {recall}");
    }

    #[test]
    fn wrong_dimensions_are_refused() {
        let mut ix = VectorIndex::new(4);
        assert_eq!(ix.push(&[1.0; 3]), Err(DimensionMismatch { want: 4, got: 3 }));
        assert!(ix.search(&[1.0; 5], 1, None).is_err());
        assert!(ix.is_empty());
    }

    #[test]
    fn retain_keeps_order() {
        let mut ix = VectorIndex::new(2);
        for i in 0..5 {
            ix.push(&[i as f32, 0.0]).unwrap();
        }
        ix.retain(|i| i != 1 && i != 3);
        assert_eq!(ix.raw(), &[0.0, 0.0, 2.0, 0.0, 4.0, 0.0]);
    }
}
