//! `TimeoutKind` is `#[non_exhaustive]` (it has grown once already): a
//! `match` outside the crate that lists every variant but has no `_` arm
//! does not compile. The .stderr beside this file is its error.
use aegis::error::TimeoutKind;

fn name(kind: TimeoutKind) -> &'static str {
    match kind {
        TimeoutKind::Run => "run",
        TimeoutKind::Idle => "idle",
        TimeoutKind::EngineRun => "engine run",
    }
}

fn main() {
    let _ = name(TimeoutKind::Run);
}
