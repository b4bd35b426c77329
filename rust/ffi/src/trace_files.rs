//! The process-wide trace-file service: which file each launch's timeline
//! goes to, and writing it when the launch's last device finishes (called
//! by `launch` when a device leaves, and by `kernel_end`).
//!
//! File names: a launch begun with `trace_path="trace.json"` writes
//! `trace.json` if it is the first launch of this process with that path,
//! else `trace-1.json`, `trace-2.json`, ... (the suffix goes before the
//! extension), so repeated launches never overwrite each other within a
//! process. [`written`] lists the files written so far.
//!
//! May use: `mosaic_rt_core` (the runtime's tracer) and std; no handler.

use mosaic_rt_core::{IgnorePoison, Result, RtError, Runtime};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

struct Outputs {
    /// Base path -> launches written with it so far.
    counts: HashMap<String, u32>,
    written: Vec<String>,
}

fn outputs() -> &'static Mutex<Outputs> {
    static OUT: OnceLock<Mutex<Outputs>> = OnceLock::new();
    OUT.get_or_init(|| Mutex::new(Outputs { counts: HashMap::new(), written: Vec::new() }))
}

/// Per launch handle: the base path its trace goes to.
fn paths() -> &'static Mutex<HashMap<u64, String>> {
    static PATHS: OnceLock<Mutex<HashMap<u64, String>>> = OnceLock::new();
    PATHS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `base` for the first launch, else `base` with `-N` before its extension.
pub fn numbered(base: &str, n: u32) -> String {
    if n == 0 {
        return base.to_string();
    }
    let name_start = base.rfind('/').map_or(0, |i| i + 1);
    match base[name_start..].rfind('.') {
        Some(dot) if dot > 0 => {
            let at = name_start + dot;
            format!("{}-{n}{}", &base[..at], &base[at..])
        }
        _ => format!("{base}-{n}"),
    }
}

/// Trace files written by this process, oldest first.
pub fn written() -> Vec<String> {
    outputs().lock().ignore_poison().written.clone()
}

/// The launch's timeline as Chrome trace-event JSON (`None` without tracing).
pub fn trace_json(rt: &Runtime) -> Option<String> {
    Some(rt.tracer()?.to_json())
}

/// At `kernel_begin`: the launch `handle` writes its trace to `base`.
pub fn set_output(handle: u64, base: &str) {
    paths().lock().ignore_poison().entry(handle).or_insert_with(|| base.to_string());
}

/// `device` of launch `handle` finished (normally or not). The last one
/// writes the trace file; an error only if writing it failed.
pub fn device_finished(handle: u64, rt: &Runtime, device: u32) -> Result<()> {
    let Some(t) = rt.tracer() else { return Ok(()) };
    if !t.device_finished(device) {
        return Ok(());
    }
    let Some(base) = paths().lock().ignore_poison().remove(&handle) else { return Ok(()) };
    let json = trace_json(rt).unwrap_or_default();
    let path = {
        let mut out = outputs().lock().ignore_poison();
        let n = out.counts.entry(base.clone()).or_insert(0);
        let path = numbered(&base, *n);
        *n += 1;
        out.written.push(path.clone());
        path
    };
    std::fs::write(&path, json).map_err(|e| RtError::value(format!("cannot write the kernel's trace to {path:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn numbered_paths_put_the_suffix_before_the_extension() {
        assert_eq!(numbered("trace.json", 0), "trace.json");
        assert_eq!(numbered("trace.json", 1), "trace-1.json");
        assert_eq!(numbered("out/run.v2/trace.json", 12), "out/run.v2/trace-12.json");
        assert_eq!(numbered("out.d/trace", 2), "out.d/trace-2");
        assert_eq!(numbered(".hidden", 1), ".hidden-1");
    }
}
