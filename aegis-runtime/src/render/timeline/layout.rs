//! The page's geometry: the lanes' rows and the time axis.

/// The lane labels' column.
pub(super) const LABEL_W: f64 = 230.0;
/// The chart: the run's span, whatever its length.
pub(super) const CHART_W: f64 = 1080.0;
const RIGHT_PAD: f64 = 50.0;
/// The time axis above the lanes.
pub(super) const AXIS_H: f64 = 34.0;
pub(super) const ROW_H: f64 = 30.0;
pub(super) const BAR_H: f64 = 16.0;
/// Under the lanes: the rules' labels.
const FOOT_H: f64 = 30.0;
/// A bar stays visible however short it was.
const MIN_BAR: f64 = 3.0;

/// Where things go on a page of `lanes` rows spanning the run's time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Milliseconds from the run's start to the page's right edge.
    pub(super) span: f64,
    /// Rows drawn: one per lane, one for an empty page.
    rows: usize,
}

/// One lane's row.
#[derive(Debug, Clone, Copy)]
pub(super) struct Row {
    pub(super) top: f64,
    /// The top of a bar.
    pub(super) bar_y: f64,
    /// The row's middle line.
    pub(super) mid: f64,
}

impl Layout {
    /// A page ending at `end` ms with `lanes` lanes.
    pub(super) fn new(end: f64, lanes: usize) -> Self {
        Layout {
            span: end.max(1.0),
            rows: lanes.max(1),
        }
    }

    /// The x of `t` ms since the run began.
    pub(super) fn x(&self, t: f64) -> f64 {
        LABEL_W + (t / self.span).clamp(0.0, 1.0) * CHART_W
    }

    /// The left edge and width of a mark from `start` to `end` ms.
    pub(super) fn extent(&self, start: f64, end: f64) -> (f64, f64) {
        let x0 = self.x(start);
        (x0, (self.x(end) - x0).max(MIN_BAR))
    }

    /// Whether a label at `x` is near the right edge (anchored at its end).
    pub(super) fn near_right(&self, x: f64) -> bool {
        x > LABEL_W + CHART_W * 0.8
    }

    pub(super) fn width(&self) -> f64 {
        LABEL_W + CHART_W + RIGHT_PAD
    }

    /// The bottom of the last lane.
    pub(super) fn lanes_bottom(&self) -> f64 {
        AXIS_H + ROW_H * self.rows as f64
    }

    pub(super) fn height(&self) -> f64 {
        self.lanes_bottom() + FOOT_H
    }

    /// The `i`th lane's row.
    pub(super) fn row(&self, i: usize) -> Row {
        let top = AXIS_H + ROW_H * i as f64;
        Row {
            top,
            bar_y: top + (ROW_H - BAR_H) / 2.0,
            mid: top + ROW_H / 2.0,
        }
    }

    /// The axis' ticks, in ms: from 0 every [`tick_step`] to the end.
    pub(super) fn ticks(&self) -> Vec<f64> {
        let step = tick_step(self.span);
        let mut ticks = Vec::new();
        let mut t = 0.0;
        while t <= self.span + 0.5 {
            ticks.push(t);
            t += step;
        }
        ticks
    }
}

/// A tick step of 1, 2 or 5 × 10^k ms giving at most about 10 ticks.
fn tick_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_steps_across_the_span() {
        assert_eq!(tick_step(1.0), 1.0);
        assert_eq!(tick_step(95.0), 10.0);
        assert_eq!(tick_step(150.0), 20.0);
        assert_eq!(tick_step(4_000.0), 500.0);
        let ticks = Layout::new(1_000.0, 2).ticks();
        assert_eq!(ticks.first(), Some(&0.0));
        assert_eq!(ticks.last(), Some(&1_000.0));
        assert_eq!(ticks.len(), 11);
    }

    #[test]
    fn times_map_into_the_chart_and_short_marks_stay_visible() {
        let layout = Layout::new(1_000.0, 0);
        assert_eq!(layout.x(0.0), LABEL_W);
        assert_eq!(layout.x(1_000.0), LABEL_W + CHART_W);
        assert_eq!(layout.x(5_000.0), LABEL_W + CHART_W, "clamped to the chart");
        assert_eq!(layout.extent(500.0, 500.0).1, MIN_BAR);
        assert_eq!(
            layout.lanes_bottom(),
            AXIS_H + ROW_H,
            "an empty page keeps one row"
        );
    }
}
