//! Vectors a host takes from a state machine every turn and hands back, so
//! a turn fills last turn's allocation instead of growing a new one.

/// Puts `used`, emptied, in `slot` for the next turn, if `slot` is still
/// empty (nothing queued since it was taken) and smaller.
pub(crate) fn hand_back<T>(slot: &mut Vec<T>, mut used: Vec<T>) {
    used.clear();
    if slot.is_empty() && slot.capacity() < used.capacity() {
        *slot = used;
    }
}
