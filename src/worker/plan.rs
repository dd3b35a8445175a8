//! Which queue a claim asks first, and for how many jobs: strict order, or
//! asynq's weighted priority.

/// The order of a worker's queues for its claims.
#[derive(Clone, Debug)]
pub(crate) struct QueuePlan {
    /// One weight per queue; `None`: strict order.
    weights: Option<Vec<u32>>,
    /// State of the weighted draw (xorshift64, never zero).
    rng: u64,
}

impl QueuePlan {
    pub(crate) fn new(weights: Option<Vec<u32>>) -> QueuePlan {
        QueuePlan {
            weights,
            rng: seed(),
        }
    }

    /// In which order to claim from which of `queues` queues, and how many
    /// at most from each: strict mode tries the queues in order; weighted
    /// mode first deals `want` slots out by weight (a weighted draw per
    /// slot), then offers what is left to every queue in a weighted random
    /// order.
    pub(crate) fn plan(&mut self, queues: usize, want: usize) -> Vec<(usize, usize)> {
        let Some(weights) = self.weights.clone() else {
            return (0..queues).map(|q| (q, want)).collect();
        };
        let mut shares = vec![0; weights.len()];
        for _ in 0..want {
            shares[self.draw(&weights, &[])] += 1;
        }
        let mut plan: Vec<(usize, usize)> = shares
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| (q, *n))
            .collect();
        let mut order = Vec::with_capacity(weights.len());
        while order.len() < weights.len() {
            let q = self.draw(&weights, &order);
            order.push(q);
        }
        plan.extend(order.into_iter().map(|q| (q, want)));
        plan
    }

    /// A queue index drawn with probability proportional to its weight,
    /// among those not in `skip`.
    fn draw(&mut self, weights: &[u32], skip: &[usize]) -> usize {
        // xorshift64: quality is plenty for spreading claims.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let total: u64 = weights
            .iter()
            .enumerate()
            .filter(|(q, _)| !skip.contains(q))
            .map(|(_, w)| u64::from(*w))
            .sum();
        let mut point = self.rng % total.max(1);
        for (q, w) in weights.iter().enumerate() {
            if skip.contains(&q) {
                continue;
            }
            if point < u64::from(*w) {
                return q;
            }
            point -= u64::from(*w);
        }
        (0..weights.len()).find(|q| !skip.contains(q)).unwrap_or(0)
    }
}

/// A non-zero seed for the weighted queue draw.
fn seed() -> u64 {
    let random = uuid::Uuid::new_v4().as_u128();
    (random as u64) | 1
}
