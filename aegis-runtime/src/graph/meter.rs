//! The spend meter: what one run has spent in tokens and money, what its
//! budget and each activation's cap leave, and the attempt in progress.
//!
//! The engine makes a [`RunLedger`] per `start`/`resume` call and a
//! [`SpendMeter`] per attempt of a Paladin node, handed to the attempt in
//! its `NodeContext`; the Paladin service charges every completion to it
//! and puts it in scope (a task-local) around each provider call, so a
//! fallback chain can check a hop against what is left before it sends.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::policy::hop::HopNote;
use crate::policy::{Money, Price, PriceTable, Remaining, Skip, Spend, SpendBudget};

/// One run's prices, budget and spend so far.
#[derive(Debug, Default)]
pub(crate) struct RunLedger {
    prices: Arc<PriceTable>,
    budget: Option<SpendBudget>,
    spent: Mutex<Spend>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one is still
    // consistent (plain sums).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunLedger {
    /// A ledger pricing calls by `prices`, bounded by `budget`.
    pub(crate) fn new(prices: Arc<PriceTable>, budget: Option<SpendBudget>) -> Self {
        RunLedger {
            prices,
            budget,
            spent: Mutex::new(Spend::default()),
        }
    }

    /// What the run has spent.
    pub(crate) fn spent(&self) -> Spend {
        *lock(&self.spent)
    }

    /// The run's budget.
    pub(crate) fn budget(&self) -> Option<&SpendBudget> {
        self.budget.as_ref()
    }

    /// What is left of the run's budget (no bound without one).
    pub(crate) fn remaining(&self) -> Remaining {
        self.budget
            .map(|b| b.remaining(&self.spent()))
            .unwrap_or_default()
    }

    /// Whether nothing at all is left of the run's budget.
    pub(crate) fn exhausted(&self) -> bool {
        self.remaining().is_exhausted()
    }

    /// What is left for an activation that spent `spent` under `cap`: the
    /// tighter of the run's budget and the cap; `None` when neither bounds
    /// anything.
    pub(crate) fn remaining_under(
        &self,
        cap: Option<&SpendBudget>,
        spent: &Spend,
    ) -> Option<Remaining> {
        let run = self
            .budget
            .filter(SpendBudget::is_bounded)
            .map(|_| self.remaining());
        let node = cap.filter(|c| c.is_bounded()).map(|c| c.remaining(spent));
        match (run, node) {
            (Some(r), Some(n)) => Some(r.min(n)),
            (r, n) => r.or(n),
        }
    }

    fn charge(&self, spend: &Spend) {
        let mut spent = lock(&self.spent);
        *spent = spent.plus(spend);
    }
}

#[derive(Debug)]
struct Attempt {
    run: Arc<RunLedger>,
    /// The activation's cap.
    cap: Option<SpendBudget>,
    /// What the activation's earlier attempts spent.
    before: Spend,
    spent: Mutex<Spend>,
    skips: Mutex<Vec<Skip>>,
    hops: Mutex<Vec<HopNote>>,
    /// What the attempt's first request was expected to spend.
    expected: Mutex<Option<Spend>>,
}

/// One attempt's meter: charges go to the attempt and to its run. The
/// default meter (every node that calls no model) meters nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpendMeter(Option<Arc<Attempt>>);

tokio::task_local! {
    static CURRENT: SpendMeter;
}

impl SpendMeter {
    /// A meter for an attempt of an activation that spent `before` in its
    /// earlier attempts, under the activation's `cap` and `run`'s budget.
    pub(crate) fn for_attempt(
        run: Arc<RunLedger>,
        cap: Option<SpendBudget>,
        before: Spend,
    ) -> Self {
        SpendMeter(Some(Arc::new(Attempt {
            run,
            cap,
            before,
            spent: Mutex::new(Spend::default()),
            skips: Mutex::new(Vec::new()),
            hops: Mutex::new(Vec::new()),
            expected: Mutex::new(None),
        })))
    }

    /// The meter in scope ([`SpendMeter::scope`]), else one that meters
    /// nothing.
    pub(crate) fn current() -> SpendMeter {
        CURRENT.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `fut` with this meter in scope.
    pub(crate) async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }

    /// Whether this meter records anything.
    pub(crate) fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// The price of `model` at `provider`, if the run's table has one.
    pub(crate) fn price(&self, provider: &str, model: &str) -> Option<Price> {
        self.0.as_ref()?.run.prices.price(provider, model)
    }

    /// What `prompt` and `completion` tokens of `model` at `provider` cost
    /// (nothing when unpriced).
    pub(crate) fn cost(
        &self,
        provider: &str,
        models: &[&str],
        prompt: u64,
        completion: u64,
    ) -> Money {
        models
            .iter()
            .find_map(|m| self.price(provider, m))
            .map_or(Money::ZERO, |p| p.cost(prompt, completion))
    }

    /// Charges `spend` to the attempt and its run.
    pub(crate) fn charge(&self, spend: &Spend) {
        let Some(a) = &self.0 else { return };
        {
            let mut spent = lock(&a.spent);
            *spent = spent.plus(spend);
        }
        a.run.charge(spend);
    }

    /// What is left: the tighter of the run's budget and the activation's
    /// cap; `None` when neither bounds anything.
    pub(crate) fn remaining(&self) -> Option<Remaining> {
        let a = self.0.as_ref()?;
        let spent = a.before.plus(&lock(&a.spent));
        a.run.remaining_under(a.cap.as_ref(), &spent)
    }

    /// The run's hop price ratio, in thousandths.
    pub(crate) fn max_hop_price_ratio_permille(&self) -> Option<u32> {
        self.0
            .as_ref()?
            .run
            .budget()
            .and_then(|b| b.max_hop_price_ratio_permille)
    }

    /// Records a skipped hop, for the attempt's record and trace.
    pub(crate) fn skipped(&self, skip: Skip) {
        if let Some(a) = &self.0 {
            lock(&a.skips).push(skip);
        }
    }

    /// Records a fallback hop, for the attempt's record (its attempt
    /// number is the engine's to set).
    pub(crate) fn hopped(&self, hop: impl FnOnce() -> HopNote) {
        if let Some(a) = &self.0 {
            lock(&a.hops).push(hop());
        }
    }

    /// Notes what a request of the attempt is expected to spend; the first
    /// one stands for the attempt (a retry resends it).
    pub(crate) fn expect(&self, spend: Spend) {
        if let Some(a) = &self.0 {
            lock(&a.expected).get_or_insert(spend);
        }
    }

    /// What the attempt's first request was expected to spend, if noted.
    pub(crate) fn expected(&self) -> Option<Spend> {
        self.0.as_ref().and_then(|a| *lock(&a.expected))
    }

    /// The attempt's spend so far.
    pub(crate) fn spent(&self) -> Spend {
        self.0.as_ref().map(|a| *lock(&a.spent)).unwrap_or_default()
    }

    /// Takes the skips recorded so far.
    pub(crate) fn take_skips(&self) -> Vec<Skip> {
        self.0
            .as_ref()
            .map(|a| std::mem::take(&mut *lock(&a.skips)))
            .unwrap_or_default()
    }

    /// Takes the hops recorded so far.
    pub(crate) fn take_hops(&self) -> Vec<HopNote> {
        self.0
            .as_ref()
            .map(|a| std::mem::take(&mut *lock(&a.hops)))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(budget: SpendBudget, cap: Option<SpendBudget>) -> (Arc<RunLedger>, SpendMeter) {
        let prices = PriceTable::new().with_price(
            "p",
            "m",
            Price::new(
                Money::from_nano_usd(1_000_000_000),
                Money::from_nano_usd(2_000_000_000),
            ),
        );
        let run = Arc::new(RunLedger::new(Arc::new(prices), Some(budget)));
        let m = SpendMeter::for_attempt(run.clone(), cap, Spend::default());
        (run, m)
    }

    #[test]
    fn charges_reach_the_attempt_and_the_run() {
        let (run, m) = meter(SpendBudget::new().with_max_tokens(100), None);
        // 1 $/M in, 2 $/M out: 10 in and 5 out cost 20 nano-dollars.
        let cost = m.cost("p", &["x", "m"], 10, 5);
        assert_eq!(cost, Money::from_nano_usd(20_000));
        m.charge(&Spend::new(10, 5, cost));
        assert_eq!(m.spent().total_tokens(), 15);
        assert_eq!(run.spent().cost, cost);
        assert_eq!(m.remaining().and_then(|r| r.tokens), Some(85));
    }

    #[test]
    fn the_node_cap_tightens_the_run_budget() {
        let cap = SpendBudget::new().with_max_tokens(20);
        let (_, m) = meter(SpendBudget::new().with_max_tokens(100), Some(cap));
        m.charge(&Spend::new(15, 0, Money::ZERO));
        assert_eq!(m.remaining().and_then(|r| r.tokens), Some(5));
        m.charge(&Spend::new(5, 0, Money::ZERO));
        assert!(m.remaining().is_some_and(|r| r.is_exhausted()));
    }

    #[test]
    fn the_default_meter_meters_nothing() {
        let m = SpendMeter::default();
        m.charge(&Spend::new(10, 5, Money::ZERO));
        assert!(m.remaining().is_none());
        assert!(m.spent().is_zero());
    }
}
