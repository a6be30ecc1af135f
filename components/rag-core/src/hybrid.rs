//! Hybrid retrieval, what the RAG tools answer with: the question's nearest chunks by vector
//! and its best chunks by BM25, fused by weighted reciprocal rank ([`crate::fuse`]); chunks
//! whose vector score is below the threshold are dropped, so a threshold means the same as in
//! vector-only search.

use crate::fuse::rrf_weighted;

/// The vector leg counts twice the keyword leg when fusing: on the development questions the
/// keyword leg adds names and flags the vectors miss, but at equal weight it pushes good vector
/// hits out of the top ten.
pub const VECTOR_WEIGHT: f32 = 2.0;
/// Candidates per leg before fusing.
pub const LEG_DEPTH: usize = 100;

/// Candidates per result when results are spread over sections ([`spread`]): the best
/// `DIVERSITY_POOL × limit` hits are spread. On the development questions any pool from 2 to
/// 10 gives the same results.
pub const DIVERSITY_POOL: usize = 3;

/// One fused result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fused {
    /// The chunk's position in its index.
    pub position: usize,
    /// Fused rank score (higher is better; comparable within one search only).
    pub fused: f32,
    /// The chunk's normalised vector score for the question ([`crate::score`]).
    pub score: f32,
}

/// Fuses the legs (positions, best first; each [`LEG_DEPTH`] deep) into the best `k` whose
/// vector score (`score` of a position) is at least `threshold`, the vector leg at
/// [`VECTOR_WEIGHT`].
pub fn fuse(
    by_vector: &[usize],
    by_keyword: &[usize],
    k: usize,
    threshold: f32,
    score: impl Fn(usize) -> f32,
) -> Vec<Fused> {
    fuse_weighted(by_vector, by_keyword, VECTOR_WEIGHT, k, threshold, score)
}

/// [`fuse`] with the vector leg at `vector_weight` (the keyword leg at 1).
pub fn fuse_weighted(
    by_vector: &[usize],
    by_keyword: &[usize],
    vector_weight: f32,
    k: usize,
    threshold: f32,
    score: impl Fn(usize) -> f32,
) -> Vec<Fused> {
    let mut out = Vec::new();
    for (position, fused) in rrf_weighted(&[(by_vector, vector_weight), (by_keyword, 1.0)]) {
        let score = score(position);
        if score >= threshold {
            out.push(Fused { position, fused, score });
            if out.len() == k {
                break;
            }
        }
    }
    out
}

/// Spreads ranked hits over sections: the best hit of each section comes first, in rank order,
/// until `limit`; then the remaining hits in rank order. A question that needs two sections
/// then finds both in the first results instead of several passages of one (on the development
/// questions the Rust book's all-found@10 rose from 0.67 to 0.83, and nothing else fell).
pub fn spread<T, K: Eq + std::hash::Hash>(ranked: Vec<T>, limit: usize, section: impl Fn(&T) -> K) -> Vec<T> {
    let mut seen = std::collections::HashSet::new();
    let (mut out, mut rest) = (Vec::with_capacity(limit), Vec::new());
    for hit in ranked {
        if out.len() < limit && seen.insert(section(&hit)) {
            out.push(hit);
        } else {
            rest.push(hit);
        }
    }
    let room = limit.saturating_sub(out.len());
    out.extend(rest.into_iter().take(room));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_section_first_then_the_rest_by_rank() {
        // (id, section), best first: a1 a2 b1 a3 c1 b2.
        let ranked = vec![(1, 'a'), (2, 'a'), (3, 'b'), (4, 'a'), (5, 'c'), (6, 'b')];
        let ids = |v: Vec<(i32, char)>| v.into_iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(spread(ranked.clone(), 4, |h| h.1)), [1, 3, 5, 2]);
        assert_eq!(ids(spread(ranked.clone(), 2, |h| h.1)), [1, 3]);
        assert_eq!(ids(spread(ranked.clone(), 10, |h| h.1)), [1, 3, 5, 2, 4, 6]);
        assert!(spread(Vec::<(i32, char)>::new(), 3, |h| h.1).is_empty());
    }

    #[test]
    fn agreement_wins_and_the_threshold_drops_weak_vectors() {
        let scores = [0.9, 0.8, 0.3, 0.7];
        // 1 is second in both legs; 0 first by vector only; 3 first by keyword only.
        let out = fuse(&[0, 1, 2], &[3, 1], 10, 0.5, |i| scores[i]);
        let order: Vec<usize> = out.iter().map(|f| f.position).collect();
        assert_eq!(order, [1, 0, 3], "2 scores 0.3, under the threshold");
        assert_eq!(out[0].score, 0.8);
        assert_eq!(fuse(&[0, 1, 2], &[3, 1], 1, 0.0, |i| scores[i]).len(), 1);
    }
}
