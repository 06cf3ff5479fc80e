"""longrun's runner: reads the contract, streams records through a model, writes results."""
