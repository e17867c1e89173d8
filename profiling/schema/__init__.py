"""``report.json``'s schema: the report's model in msgspec Structs (:mod:`.model`), the contract
every reader and writer of the report holds to, below every room that reads or writes it."""
