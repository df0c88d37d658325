//! What a caught panic said: every host that turns a panic into an error of
//! its own (the server's crash-stop, the store's guard around sled, the
//! simulation's report of a seed) reads the message here, the one way.

/// The message a panic carried (`panic!("...")` or `panic!("{}", x)`).
pub fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_is_read_from_either_payload() {
        let plain = std::panic::catch_unwind(|| panic!("plain")).expect_err("panicked");
        assert_eq!(message(plain.as_ref()), "plain");
        let formatted = std::panic::catch_unwind(|| panic!("{} {}", "with", 2)).expect_err("panicked");
        assert_eq!(message(formatted.as_ref()), "with 2");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).expect_err("panicked");
        assert_eq!(message(other.as_ref()), "a panic without a message");
    }
}
