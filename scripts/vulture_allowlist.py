"""Names vulture reports as unused that are used all the same (scripts/check runs vulture).

Each line says who uses the name: a framework reading it by name, a wire format's field, or
a signature a protocol requires. Delete a line when its name goes.
"""

# ruff: noqa: B018
# mypy: ignore-errors
_ = object()

# Schema fields: read by pydantic and serialised to the wire, never by attribute in our code.
_.observed_generation  # Condition, statuses (contracts)
_.operator  # Toleration
_.effect  # Toleration
_.toleration_seconds  # Toleration
_.allowed_namespaces  # InferenceConfigSpec, read from the raw object by core.resolve
_.contract_version  # RunnerContract
_.job_id  # RunnerContract (Krateo's field)
_.made_at  # ApiKeysStatus (status.apiKeys.madeAt, for people)
# Framework hooks looked up by name.
_.tempdir  # tempfile.tempdir, read by tempfile (local/servers/triton_onnx.py sets it)
_.collect_ignore_glob  # pytest reads it from a conftest (tests/kueue/conftest.py)
_.pool_classes_by_scheme  # urllib3 PoolManager reads it (runners/httpio.py GuardedAdapter)
_._create_connection  # http.client's HTTPConnection.connect calls it (runners/netguard.py)
_.ignore_aliases  # yaml.SafeDumper (controller/crds.py)
_.api_instance  # kubernetes LeaseLock reads it
_.keep_alive  # kubernetes Configuration
_.ModelInfer  # the gRPC servicer's method name
_.makefile  # socket protocol (bench's canned socket)
_.server_version  # http.server's Server header (batchapi/server.py)
_.request_queue_size  # socketserver's listen backlog (bench/sharded_run.py LatencyServer)
_.address_family  # socketserver reads it: an IPv6 listen address (runners/tokencheck/server.py)
_.do_OPTIONS  # http.server dispatches by method name (runners/tokencheck/server.py)
_.readable  # io.RawIOBase protocol (tests/batchapi/test_bodies.py)
_.readinto  # io.RawIOBase protocol (tests/batchapi/test_bodies.py)
_.int64_param  # protobuf field
_.string_param  # protobuf field
# Signatures a protocol fixes: __exit__, signal handlers, KServe's predict.
_.tb
_.et
_.exc_type
_.signum
_.frame
_.response_headers
_.aws_credentials  # a pytest fixture's yield-only setup
# Documented helpers of the test tree and the peers harness.
_.rss_bytes  # e2e/peers/README.md
_.service_unavailable  # tests/test_ci_services.py
_.EchoClient  # registered by name through LONGRUN_RUNNER_PLUGINS
_.GcsBackend  # the test plug-in's backend, named by its settings model
_.require_controllers  # e2e fixtures for real-control-plane suites
_.ssl_ca_cert  # kubernetes Configuration (e2e/real)
_.cert_file  # kubernetes Configuration (e2e/real)
_.add_cleanup  # e2e/README.md: the real control plane's hook for agents started in-process
# External hosts (issue 31).
_.models_text  # InferenceHostStatus (a printer column, written by pydantic)
_.allocated_slots  # InferenceHostStatus (status.allocatedSlots, for people)
_.allocated_memory  # InferenceHostStatus (status.allocatedMemory, for people)
_.OpenAIProtocol  # imported by name: controller/hosts/protocols/__init__.py BUILTIN
_.OllamaProtocol  # imported by name: controller/hosts/protocols/__init__.py BUILTIN
_.InferencedProtocol  # imported by name: controller/hosts/protocols/__init__.py BUILTIN
_.pre_tokenizer  # tokenizers.Tokenizer attribute (e2e/peers/servers/vllm_setup.py)
_.chat_template  # transformers tokenizer attribute, saved with it
# Placement schema fields (contracts/serving/placement.py), serialised to the pod as they are.
_.weight  # Preferred(Pod)SchedulingTerm
_.max_skew  # TopologySpreadConstraint
_.when_unsatisfiable  # TopologySpreadConstraint
_.min_domains  # TopologySpreadConstraint
_.node_affinity_policy  # TopologySpreadConstraint
_.node_taints_policy  # TopologySpreadConstraint
_.seekable  # io.RawIOBase protocol, called by pyarrow (runners/parquet.py RangeFile)
_.writelines  # file protocol of runners/redact.py's redacting stream
_.writeable  # numpy array flag, set False on runners/models/columnrows.py's shared matrices
