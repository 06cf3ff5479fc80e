"""`longrun batch-api --local`: the Batch API on one machine, batches run by `longrun run`."""
