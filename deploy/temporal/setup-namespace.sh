#!/bin/sh
# One-shot (admin-tools image), once the server answers: the namespace Relax runs in and the search
# attributes its training runs set (workflows/definitions.ts RELAX_SEARCH_ATTRIBUTES); without them
# a run's workflow tasks fail. Relax workers start only after this succeeds.
set -eu
ns="${TEMPORAL_NAMESPACE:-default}"
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" | grep -q SERVING; do echo "waiting for Temporal at $TEMPORAL_ADDRESS"; sleep 1; done
temporal operator namespace describe --namespace "$ns" >/dev/null 2>&1 || temporal operator namespace create --namespace "$ns" --retention 7d
for attr in RelaxRunId:Keyword RelaxStatus:Keyword RelaxTask:Keyword RelaxModel:Keyword RelaxStep:Int RelaxAccuracy:Double; do
  name="${attr%%:*}"; type="${attr#*:}"
  temporal operator search-attribute create --namespace "$ns" --name "$name" --type "$type" 2>/dev/null || echo "search attribute $name exists"
done
echo "namespace $ns and Relax's search attributes are ready"
