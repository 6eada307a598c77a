# TensorBoard event records: protobuf-c and the generated message code.
