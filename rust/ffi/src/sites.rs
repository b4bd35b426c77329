//! The process-wide table of source sites: text <-> id (the core stores
//! only ids). Python interns a site's text once at trace time
//! (`_native.intern_site`) and passes the id to every op as attribute
//! `site`.

use mosaic_rt_core::IgnorePoison;
use std::collections::HashMap;
use std::sync::{Mutex, Once};

/// Distinct sites kept; beyond this new texts get id 0 (unknown).
pub const MAX_SITES: usize = 1 << 20;

#[derive(Default)]
struct SiteTable {
    ids: HashMap<String, u32>,
    texts: HashMap<u32, String>,
}

static TABLE: Mutex<Option<SiteTable>> = Mutex::new(None);

fn install_resolver() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        mosaic_rt_core::site::set_resolver(text);
        mosaic_rt_core::site::set_interner(intern);
    });
}

/// FNV-1a of the text: ids must not depend on the order texts are interned
/// in, because they are attributes of the compiled program -- the same
/// kernel must lower to the same program in every process (jax's persistent
/// compilation cache keys on it).
fn hash(text: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The id of `text` (never 0; the same text always gets the same id, in
/// every process, unless two texts collide -- then the later one probes on).
pub fn intern(text: &str) -> u32 {
    install_resolver();
    let mut guard = TABLE.lock().ignore_poison();
    let t = guard.get_or_insert_with(SiteTable::default);
    if let Some(&id) = t.ids.get(text) {
        return id;
    }
    if t.texts.len() >= MAX_SITES {
        return 0;
    }
    let mut id = hash(text).max(1);
    while t.texts.contains_key(&id) {
        id = id.wrapping_add(1).max(1);
    }
    t.texts.insert(id, text.to_string());
    t.ids.insert(text.to_string(), id);
    id
}

/// The text of site `id`.
pub fn text(id: u32) -> Option<String> {
    if id == 0 {
        return None;
    }
    let guard = TABLE.lock().ignore_poison();
    guard.as_ref()?.texts.get(&id).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_resolves() {
        let a = intern("kernel.py:12:4 (k)");
        assert_ne!(a, 0);
        assert_eq!(intern("kernel.py:12:4 (k)"), a);
        assert_ne!(intern("kernel.py:13:4 (k)"), a);
        assert_eq!(text(a).as_deref(), Some("kernel.py:12:4 (k)"));
        assert_eq!(mosaic_rt_core::site::text(a).as_deref(), Some("kernel.py:12:4 (k)"));
        assert_eq!(text(0), None);
        // Order-independent: the id is a function of the text.
        assert_eq!(intern("kernel.py:99:1 (z)"), hash("kernel.py:99:1 (z)").max(1));
    }
}
