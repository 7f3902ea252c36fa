#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_coordinator::fuzzing::coordinator_config(data));
