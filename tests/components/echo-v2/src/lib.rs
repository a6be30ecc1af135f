//! Echo tool, version 2 (see ../echo-v1/src/echo.rs).
const VERSION: &str = "v2";
include!("../../echo-v1/src/echo.rs");
