//! indicatif bars for the library's [`Progress`] reports: one line per
//! step (a tensor count, a byte count, or a spinner for one iree-compile
//! run), drawn on stderr only when it is a terminal and `--quiet` is off.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln::progress::{Progress, Unit};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The bars of the steps that are running, by label.
struct Bars {
    multi: MultiProgress,
    running: Mutex<HashMap<String, ProgressBar>>,
}

/// A [`Progress`] drawing bars, or `None` when nothing should be drawn
/// (`--quiet`, or stderr is not a terminal).
pub fn bars() -> Option<Arc<dyn Progress>> {
    if super::quiet() || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(Arc::new(Bars {
        multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        running: Mutex::new(HashMap::new()),
    }))
}

fn style(unit: Unit) -> ProgressStyle {
    let template = match unit {
        Unit::Tensors => "{prefix:20} [{bar:30}] {pos}/{len} tensors {elapsed}",
        Unit::Bytes => "{prefix:20} [{bar:30}] {bytes}/{total_bytes} {elapsed}",
        Unit::None => "{prefix:20} {spinner} {elapsed}",
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Progress for Bars {
    fn start(&self, label: &str, total: u64, unit: Unit) {
        let bar = match unit {
            Unit::None => ProgressBar::new_spinner(),
            _ => ProgressBar::new(total),
        };
        let bar = self.multi.add(bar);
        bar.set_style(style(unit));
        bar.set_prefix(label.to_string());
        if unit == Unit::None {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        if let Ok(mut r) = self.running.lock() {
            r.insert(label.to_string(), bar);
        }
    }

    fn advance(&self, label: &str, n: u64) {
        if let Some(bar) = self.running.lock().ok().and_then(|r| r.get(label).cloned()) {
            bar.inc(n);
        }
    }

    fn finish(&self, label: &str, ok: bool) {
        let Some(bar) = self.running.lock().ok().and_then(|mut r| r.remove(label)) else {
            return;
        };
        if bar.length().is_none() {
            // A compile: leave its line, with the time it took.
            bar.set_style(
                ProgressStyle::with_template("{prefix:20} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.finish_with_message(if ok { "done" } else { "failed" });
        } else {
            bar.finish_and_clear();
        }
    }
}
