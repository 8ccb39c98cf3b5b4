//! The one place that loads and calls the Lua scripts in `lua/`.
//!
//! `lua/prelude.lua` (shared helpers) is prepended to each script, after
//! the script's first line: its shebang (`#!lua flags=...`). The flags
//! decide what Redis does when it is out of memory: `send` has none, so
//! Redis refuses it before it runs (a send never half-writes), while the
//! consumer's scripts say `allow-oom`, so consumers keep draining, acking
//! and so freeing memory; read-only scripts say `no-writes`.
//!
//! Each script is one state transition. It is sent with `EVALSHA`; when
//! Redis answers NOSCRIPT (restart, failover, `SCRIPT FLUSH`) the script is
//! loaded again and the call retried once.

use std::sync::OnceLock;

use fred::prelude::{Client, FromValue, Value};
use fred::types::scripts::Script;

/// A script of `lua/`, known by its file name.
pub(crate) struct LuaScript {
    pub name: &'static str,
    file: &'static str,
    script: OnceLock<Script>,
}

const PRELUDE: &str = include_str!("../lua/prelude.lua");

macro_rules! lua_scripts {
    ($($konst:ident = $file:literal;)*) => {
        $(
            pub(crate) static $konst: LuaScript = LuaScript {
                name: $file,
                file: include_str!(concat!("../lua/", $file, ".lua")),
                script: OnceLock::new(),
            };
        )*
        /// Every script, for tests and for loading them up front.
        #[cfg(test)]
        pub(crate) static ALL: &[&LuaScript] = &[$(&$konst),*];
    };
}

lua_scripts! {
    SEND = "send";
    PROMOTE = "promote";
    CLAIM = "claim";
    EXTEND = "extend";
    ACK = "ack";
    NACK = "nack";
    TIMEOUT = "timeout";
    CANCEL = "cancel";
    GC = "gc";
    STATS = "stats";
    SCAN = "scan";
    INSPECT = "inspect";
}

impl LuaScript {
    fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::from_lua(self.source()))
    }

    /// The shebang line, then the prelude, then the rest of the file.
    fn source(&self) -> String {
        let (shebang, body) = self.file.split_once('\n').unwrap_or((self.file, ""));
        format!("{shebang}\n{PRELUDE}{body}")
    }

    /// The SHA1 that `EVALSHA` names the script by.
    #[cfg(test)]
    pub fn sha1(&self) -> &str {
        self.script().sha1()
    }

    /// Runs the script with `EVALSHA`, reloading it on NOSCRIPT.
    pub async fn call<R: FromValue>(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, fred::error::Error> {
        tracing::trace!(script = self.name, keys = keys.len(), args = args.len(), "evalsha");
        self.script().evalsha_with_reload(client, keys, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_documents_its_interface() {
        for s in ALL {
            assert!(s.file.starts_with("#!lua"), "lua/{}.lua lacks its shebang line", s.name);
            for part in ["KEYS[1]", "Returns", "Complexity", "Idempotent"] {
                assert!(s.file.contains(part), "lua/{}.lua header lacks {part}", s.name);
            }
            assert_eq!(s.sha1().len(), 40);
        }
    }
}
