"""Transactions: the transaction coordinator (coordinator.py), its state machine (state.py), the
`__transaction_state` topic (state_topic.py) and the COMMIT/ABORT markers it writes (markers.py)."""
from kompakt.broker.txn.coordinator import CoordinatorError, TransactionCoordinator

__all__ = ["TransactionCoordinator", "CoordinatorError"]
