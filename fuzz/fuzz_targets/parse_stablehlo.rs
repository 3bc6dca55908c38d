//! Fuzz target: the StableHLO parser never panics, and whatever it accepts
//! prints and parses back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = kiln::stablehlo::ParsedModule::parse(text) else {
        return;
    };
    if let Ok(printed) = parsed.module.print(&parsed.print_options(), None) {
        let again = kiln::stablehlo::ParsedModule::parse(&printed).expect("printed text parses");
        let reprinted = again
            .module
            .print(&again.print_options(), None)
            .expect("printed text prints");
        assert_eq!(printed, reprinted);
    }
});
