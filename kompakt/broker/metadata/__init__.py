"""What Kafka keeps in its metadata log (KRaft) and how the broker follows changes to it; a single
node keeps it in small files in the first log dir.

    state_files.py   the broker's state files (dynamic broker configs, client quotas, group
                     configs, finalized features)
    store_file.py    the one way such a file is written and read: crash-safe, CRC32C-checked
                     JSON (ACLs and SCRAM credentials of broker/security use it too)
    reconfigure.py   the components that follow dynamic broker configs (Kafka's
                     BrokerReconfigurable list): their keys, checks and how a change applies

Invariants: each state file is written whole and crash-safely (temp, fsync, rename, fsync dir,
CRC32C: store_file.py), so a crash leaves the old content or the new, and a damaged file
stops the start with its path named; a dynamic change is validated by every registered component
before it is applied, and saved only once applied (config/dynamic.py rolls a failed one back).
Other rooms use this one (security's ACL and SCRAM stores write through store_file.py); it imports
none of them back, so the rooms do not import each other round a loop.
"""
