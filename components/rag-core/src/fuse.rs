//! Reciprocal rank fusion: one ranking out of several (vectors and BM25) whose scores are not
//! comparable. Each item scores the sum of `1 / (K + rank)` over the rankings it appears in
//! (rank from 1), so agreement between legs counts more than a high place in one.

/// The constant of Cormack, Clarke and Büttcher (2009); it damps the weight of the very top ranks.
pub const K: f32 = 60.0;

/// Fuses `rankings` (each a list of item ids, best first) into one, as (id, fused score), best
/// first; ties keep the order of first appearance.
pub fn rrf(rankings: &[&[usize]]) -> Vec<(usize, f32)> {
    let weighted: Vec<(&[usize], f32)> = rankings.iter().map(|r| (*r, 1.0)).collect();
    rrf_weighted(&weighted)
}

/// [`rrf`] with a weight per ranking: each contributes `weight / (K + rank)`.
pub fn rrf_weighted(rankings: &[(&[usize], f32)]) -> Vec<(usize, f32)> {
    let mut scores: Vec<(usize, f32)> = Vec::new();
    let mut at: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for &(ranking, weight) in rankings {
        for (rank, &id) in ranking.iter().enumerate() {
            let add = weight / (K + rank as f32 + 1.0);
            match at.get(&id) {
                Some(&slot) => scores[slot].1 += add,
                None => {
                    at.insert(id, scores.len());
                    scores.push((id, add));
                }
            }
        }
    }
    // A stable sort keeps first appearance among equals.
    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
    scores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_beats_one_top_place() {
        let vectors = [1, 2, 3];
        let keywords = [4, 2, 5];
        let fused = rrf(&[&vectors, &keywords]);
        assert_eq!(fused[0].0, 2, "{fused:?}");
        assert_eq!(fused.len(), 5);
        // 1 and 4 are both first in one ranking: equal, in order of appearance.
        assert_eq!((fused[1].0, fused[2].0), (1, 4));
        assert!((fused[1].1 - fused[2].1).abs() < 1e-9);
    }

    #[test]
    fn weights_scale_a_ranking() {
        let fused = rrf_weighted(&[(&[1, 2], 2.0), (&[2, 1], 1.0)]);
        assert_eq!(fused[0].0, 1, "{fused:?}");
        assert!((fused[0].1 - (2.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-6);
    }

    #[test]
    fn no_rankings_no_items() {
        assert!(rrf(&[]).is_empty());
        assert!(rrf(&[&[]]).is_empty());
    }
}
