//! The page's geometry: the lanes' rows and the time axis.

pub(super) const LABEL_W: f64 = 230.0;
pub(super) const CHART_W: f64 = 1080.0;
pub(super) const RIGHT_PAD: f64 = 50.0;
pub(super) const AXIS_H: f64 = 34.0;
pub(super) const ROW_H: f64 = 30.0;
pub(super) const BAR_H: f64 = 16.0;
pub(super) const FOOT_H: f64 = 30.0;
pub(super) const MIN_BAR: f64 = 3.0;

/// A tick step of 1, 2 or 5 × 10^k ms giving at most about 10 ticks.
pub(super) fn tick_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}
