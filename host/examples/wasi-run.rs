//! Runs a `wasi:cli` command component with Quarry's engine settings and one read-only
//! preopen. A diagnostic: it times plain Rust built for wasm32-wasip2, such as embedder-onnx's
//! `profile` example, under the code generation the sandbox uses, and with `--no-epochs`
//! without the epoch checks that deadlines cost (one run each, side by side).
//!
//! `cargo run --release -p quarry --example wasi-run -- [--no-epochs] COMPONENT.wasm HOST_DIR GUEST_DIR [ARGS...]`

use quarry::engine::QuarryEngine;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let epochs = args.first().map(String::as_str) != Some("--no-epochs");
    if !epochs {
        args.remove(0);
    }
    let [component, host_dir, guest_dir, rest @ ..] = args.as_slice() else {
        eprintln!("usage: wasi-run [--no-epochs] COMPONENT.wasm HOST_DIR GUEST_DIR [ARGS...]");
        std::process::exit(2);
    };
    let bytes = std::fs::read(component)?;
    // Keep the QuarryEngine alive: it owns the epoch ticker.
    let quarry = QuarryEngine::new(std::env::temp_dir().join("quarry-wasi-run-cache"))?;
    let (engine, component): (Engine, Component) = if epochs {
        (quarry.engine().clone(), quarry.load_component(component.as_ref(), &bytes)?.0)
    } else {
        // Quarry's code generation is wasmtime's default apart from epoch interruption.
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(false))?;
        let c = Component::new(&engine, &bytes)?;
        (engine, c)
    };
    let mut linker: Linker<State> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    let mut argv = vec!["command".to_string()];
    argv.extend(rest.iter().cloned());
    let wasi = WasiCtx::builder()
        .inherit_stdout()
        .inherit_stderr()
        .args(&argv)
        .preopened_dir(host_dir, guest_dir, FsPerms::ReadOnly)?
        .build();
    let mut store = Store::new(&engine, State { wasi, table: ResourceTable::new() });
    // Deadlines are not the point here: let the command run as long as it needs.
    store.set_epoch_deadline(u64::MAX / 2);
    let command = Command::instantiate_async(&mut store, &component, &linker).await?;
    let ok = command.wasi_cli_run().call_run(&mut store).await?;
    std::process::exit(if ok.is_ok() { 0 } else { 1 });
}
