//! Calibrating the route's confidence: a logistic model of "the route's best chapter holds the
//! answer" on two features of the evidence (how far the best chapter is ahead of the second,
//! and its share of all the evidence), fitted leave-one-manual-out so that the reported
//! confidence of each manual comes from a model that never saw it.

use anyhow::Result;
use chapter_rag::search::{Calibration, Params};

use crate::bench::{Answer, Bench};

/// The model's features of one route: `ln(best / second)` and `ln(share)`.
fn features(a: &Answer) -> [f64; 2] {
    let ratio = (a.margin / (1.0 - a.margin).max(1e-6)).max(1e-6) as f64;
    [ratio.ln(), (a.share.max(1e-6) as f64).ln()]
}

/// Fits `p = σ(w0 + w1·x1 + w2·x2)` to `data` by Newton's method with a small ridge (the
/// features are nearly collinear on some manuals).
pub fn fit(data: &[([f64; 2], bool)]) -> [f64; 3] {
    let mut w = [0.0f64; 3];
    for _ in 0..50 {
        let mut grad = [0.0f64; 3];
        let mut hess = [[0.0f64; 3]; 3];
        for (x, y) in data {
            let v = [1.0, x[0], x[1]];
            let p = 1.0 / (1.0 + (-(w[0] + w[1] * v[1] + w[2] * v[2])).exp());
            let r = p - f64::from(u8::from(*y));
            for i in 0..3 {
                grad[i] += r * v[i];
                for j in 0..3 {
                    hess[i][j] += p * (1.0 - p) * v[i] * v[j];
                }
            }
        }
        for (i, row) in hess.iter_mut().enumerate() {
            row[i] += 1e-3;
            grad[i] += 1e-3 * w[i];
        }
        let Some(step) = solve3(hess, grad) else { break };
        for i in 0..3 {
            w[i] -= step[i];
        }
        if step.iter().map(|s| s.abs()).fold(0.0, f64::max) < 1e-9 {
            break;
        }
    }
    w
}

/// Solves the 3×3 system `a·x = b` (Cramer's rule); `None` when singular.
fn solve3(a: [[f64; 3]; 3], b: [f64; 3]) -> Option<[f64; 3]> {
    let det = |m: [[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(a);
    if d.abs() < 1e-12 {
        return None;
    }
    let mut x = [0.0; 3];
    for (col, xi) in x.iter_mut().enumerate() {
        let mut m = a;
        for row in 0..3 {
            m[row][col] = b[row];
        }
        *xi = det(m) / d;
    }
    Some(x)
}

/// Right answers per bucket of confidence (quarters), as `lo-hi: right/n (rate)`.
fn buckets(pairs: &[(f64, bool)]) -> String {
    let mut b = [(0usize, 0usize, 0.0f64); 4];
    for &(p, right) in pairs {
        let slot = &mut b[((p * 4.0) as usize).min(3)];
        slot.0 += 1;
        slot.1 += usize::from(right);
        slot.2 += p;
    }
    b.iter()
        .enumerate()
        .filter(|(_, x)| x.0 > 0)
        .map(|(i, &(n, right, sum))| {
            format!(
                "{:.2}-{:.2}: {right}/{n} right ({:.2}; mean confidence {:.2})",
                i as f64 / 4.0,
                (i + 1) as f64 / 4.0,
                right as f64 / n as f64,
                sum / n as f64
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Expected calibration error over quarter buckets: the mean gap between confidence and rate.
fn ece(pairs: &[(f64, bool)]) -> f64 {
    let mut b = [(0usize, 0.0f64, 0.0f64); 4];
    for &(p, right) in pairs {
        let slot = &mut b[((p * 4.0) as usize).min(3)];
        slot.0 += 1;
        slot.1 += f64::from(u8::from(right));
        slot.2 += p;
    }
    b.iter().map(|&(_, r, s)| (r - s).abs()).sum::<f64>() / pairs.len().max(1) as f64
}

/// Fits the calibration leave-one-manual-out and prints, per manual, its buckets under the
/// model fitted on the others; then the model fitted on every manual (the default to ship).
pub fn calibrate(benches: &mut [Bench], params: &Params) -> Result<()> {
    let mut per_manual: Vec<Vec<([f64; 2], bool, f32)>> = Vec::new();
    for b in benches.iter_mut() {
        let out = b.run(params)?;
        // The uncalibrated confidence was the best chapter's share of all the evidence.
        per_manual.push(out.answers.iter().map(|a| (features(a), a.top_right, a.share)).collect());
    }
    let sigmoid = |w: &[f64; 3], x: &[f64; 2]| 1.0 / (1.0 + (-(w[0] + w[1] * x[0] + w[2] * x[1])).exp());
    println!("\n## Route confidence, calibrated leave-one-manual-out\n");
    let (mut all_raw, mut all_cal) = (Vec::new(), Vec::new());
    for (m, b) in benches.iter().enumerate() {
        let train: Vec<([f64; 2], bool)> = per_manual
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != m)
            .flat_map(|(_, v)| v.iter().map(|(x, y, _)| (*x, *y)))
            .collect();
        let w = fit(&train);
        let cal: Vec<(f64, bool)> = per_manual[m].iter().map(|(x, y, _)| (sigmoid(&w, x), *y)).collect();
        let raw: Vec<(f64, bool)> = per_manual[m].iter().map(|(_, y, share)| (f64::from(*share), *y)).collect();
        println!(
            "- {} (model fitted on the others: {:.2} {:+.2}·ln(best/second) {:+.2}·ln(share)): calibrated ECE {:.3} (raw {:.3}); {}",
            b.spec.name,
            w[0],
            w[1],
            w[2],
            ece(&cal),
            ece(&raw),
            buckets(&cal)
        );
        all_cal.extend(cal);
        all_raw.extend(raw);
    }
    println!(
        "\nall manuals, each under the model fitted on the others: ECE {:.3} (raw share {:.3})",
        ece(&all_cal),
        ece(&all_raw)
    );
    println!("  calibrated: {}", buckets(&all_cal));
    println!("  raw share:  {}", buckets(&all_raw));
    let all: Vec<([f64; 2], bool)> = per_manual.iter().flatten().map(|(x, y, _)| (*x, *y)).collect();
    let w = fit(&all);
    let c = Calibration { bias: w[0] as f32, lead: w[1] as f32, share: w[2] as f32 };
    println!("fitted on every manual (the default to ship): {c:?}");
    Ok(())
}
