"""Transactions and producer ids: the transaction coordinator (coordinator.py), its state machine
(state.py), the `__transaction_state` topic (state_topic.py), the COMMIT/ABORT markers it writes
(markers.py), and producer id allocation for InitProducerId, idempotent and transactional producers
alike (producer_ids.py: never the same id twice, across crashes)."""
from kompakt.broker.txn.coordinator import CoordinatorError, TransactionCoordinator

__all__ = ["TransactionCoordinator", "CoordinatorError"]
