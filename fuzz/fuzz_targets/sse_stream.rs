#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_agent::fuzzing::sse_stream(data));
