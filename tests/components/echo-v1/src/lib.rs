//! Echo tool, version 1 (see echo.rs).
const VERSION: &str = "v1";
include!("echo.rs");
