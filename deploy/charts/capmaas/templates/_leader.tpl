{{/*
The operator Deployments as a JSON list: one per shard (values.shards), else one for operator.watchFilter.
Each: name (Deployment), shard ("" when unsharded), watchFilter, lease (its Lease, in the release namespace).
*/}}
{{- define "capmaas.instances" -}}
{{- $fullname := include "capmaas.fullname" . -}}
{{- $base := default (printf "%s-leader" $fullname) .Values.leaderElection.leaseName -}}
{{- $out := list -}}
{{- if .Values.shards -}}
{{- range .Values.shards -}}
{{- $lease := ternary (printf "%s-%s" $base .name) (printf "%s-%s-leader" $fullname .name) (ne $.Values.leaderElection.leaseName "") -}}
{{- $out = append $out (dict "name" (printf "%s-%s" $fullname .name) "shard" .name "watchFilter" .watchFilter "lease" $lease) -}}
{{- end -}}
{{- else -}}
{{- $out = append $out (dict "name" $fullname "shard" "" "watchFilter" .Values.operator.watchFilter "lease" $base) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Selector labels of one instance (root, instance): a shard's pods carry their shard's name too. */}}
{{- define "capmaas.instanceSelectorLabels" -}}
{{ include "capmaas.selectorLabels" .root }}
{{- with .instance.shard }}
capmaas.cluster.x-k8s.io/shard: {{ . }}
{{- end }}
{{- end -}}

{{/* Fail early on settings the operator would refuse at start (it checks the same order). */}}
{{- define "capmaas.checkLeaderElection" -}}
{{- $le := .Values.leaderElection -}}
{{- if and $le.enabled (not (and (lt (float64 $le.retryPeriod) (float64 $le.renewDeadline)) (lt (float64 $le.renewDeadline) (float64 $le.leaseDuration)))) -}}
{{- fail "leaderElection: retryPeriod < renewDeadline < leaseDuration is required" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not $le.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled: without it every replica allocates MAAS machines" -}}
{{- end -}}
{{- end -}}
