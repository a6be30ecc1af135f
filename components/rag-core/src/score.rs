//! The score every result carries and every threshold applies to.
//!
//! **score = (1 + cos) / 2**, where cos is the cosine similarity of the query's and the chunk's
//! embeddings (both L2-normalised, so cos is their dot product). It lies in [0, 1]: 1 is the same
//! direction, 0.5 is unrelated (orthogonal), 0 is opposite.
//!
//! Why this one: CrewAI's default `similarity_threshold = 0.6` means different things per vector
//! store; with its default store (Chroma) it keeps chunks whose cosine is at least 0.2. With this
//! score, 0.6 keeps exactly cos ≥ 0.2, so the CrewAI default keeps its meaning, and it means the
//! same thing in every Quarry tool.

/// The normalised score of a cosine similarity.
pub fn from_cosine(cos: f32) -> f32 {
    ((1.0 + cos) / 2.0).clamp(0.0, 1.0)
}

/// The cosine similarity behind a normalised score.
pub fn to_cosine(score: f32) -> f32 {
    score.clamp(0.0, 1.0) * 2.0 - 1.0
}

/// Dot product: the cosine of two L2-normalised vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crewai_default_threshold_keeps_its_meaning() {
        assert!((from_cosine(0.2) - 0.6).abs() < 1e-6);
        assert!((to_cosine(0.6) - 0.2).abs() < 1e-6);
        assert_eq!(from_cosine(1.0), 1.0);
        assert_eq!(from_cosine(-1.0), 0.0);
        assert_eq!(from_cosine(0.0), 0.5);
        // Rounding past ±1 stays in range.
        assert_eq!(from_cosine(1.000_001), 1.0);
    }
}
