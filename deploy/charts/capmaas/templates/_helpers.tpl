{{/* Names, labels and the cross-field checks the JSON schema cannot express with a readable message. */}}

{{- define "capmaas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capmaas.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "capmaas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capmaas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "capmaas.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "capmaas.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: manager
cluster.x-k8s.io/provider: infrastructure-maas
{{- end -}}

{{- define "capmaas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capmaas.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the default MAAS credentials ("" when there are none). */}}
{{- define "capmaas.credentialsSecret" -}}
{{- $c := .Values.credentials -}}
{{- if and $c.existingSecret (or $c.endpoint $c.apiKey $c.caBundle) -}}
{{- fail "credentials: set either credentials.existingSecret or credentials.endpoint/apiKey/caBundle, not both" -}}
{{- end -}}
{{- if $c.existingSecret -}}
{{- $c.existingSecret -}}
{{- else if or $c.endpoint $c.apiKey -}}
{{- if not (and $c.endpoint $c.apiKey) -}}
{{- fail "credentials: credentials.endpoint and credentials.apiKey must be given together" -}}
{{- end -}}
{{- printf "%s-maas-credentials" (include "capmaas.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else if $c.caBundle -}}
{{- fail "credentials: credentials.caBundle needs credentials.endpoint and credentials.apiKey" -}}
{{- end -}}
{{- end -}}

{{- define "capmaas.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- if .Values.image.digest -}}{{- printf "%s@%s" $ref .Values.image.digest -}}{{- else -}}{{- $ref -}}{{- end -}}
{{- end -}}

{{/* Rules for namespaced resources; a Role in operator.namespace, or a ClusterRole when it is empty. */}}
{{- define "capmaas.namespacedRules" -}}
{{- /* Only what the code calls: kopf watches MaasClusters/MaasMachines, KubeHttp merge-patches them and their
status (never update), GETs Secrets by name (never lists or watches them) and the preferred-subnets ConfigMap
maas-preferred-subnet the same way (cluster.py). MaasMachineTemplates are watched to publish their status
(capacity and available, operator/templates.py), and MachineDeployments to warn one that asks for more than MAAS
has; MaasClusterTemplates are CAPI's business. */}}
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasclusters, maasmachines, maasmachinetemplates]
  verbs: [get, list, watch, patch]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasclusters/status, maasmachines/status, maasmachinetemplates/status]
  verbs: [patch]
{{- /* spec.addresses: an IPAddressClaim per pool entry, owned by its MaasMachine with blockOwnerDeletion (which
needs update on the owner's finalizers subresource); deleted once the server is released. */}}
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasmachines/finalizers]
  verbs: [update]
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters, machines, machinedeployments]
  verbs: [get, list, watch]
{{- /* capmaas's IPAM provider (operator/ipam.py): MaasIPPools and their status; the IPAddressClaims it
fulfils and the MaasMachine side creates and deletes; the IPAddresses it creates, unprotects and deletes. The
finalizers subresources (update): the IPAddress's ownerReferences to claim and pool carry blockOwnerDeletion,
which the OwnerReferencesPermissionEnforcement admission plugin allows only with that right on the owner. */}}
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasippools]
  verbs: [get, list, watch, patch]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasippools/status]
  verbs: [patch]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasippools/finalizers]
  verbs: [update]
- apiGroups: [ipam.cluster.x-k8s.io]
  resources: [ipaddressclaims, ipaddressclaims/status, ipaddresses]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [ipam.cluster.x-k8s.io]
  resources: [ipaddressclaims/finalizers]
  verbs: [update]
{{- /* Cluster API external remediation (operator/remediation.py): MaasRemediations are watched, their status
patched and their finalizer managed (created and deleted by CAPI's MachineHealthCheck, never by us); the
Machine's OwnerRemediated condition is set by a server-side apply of machines/status when a remediation gives
up. MaasRemediationTemplates are read by CAPI only. */}}
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasremediations]
  verbs: [get, list, watch, patch]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [maasremediations/status]
  verbs: [patch]
- apiGroups: [cluster.x-k8s.io]
  resources: [machines/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [secrets, configmaps]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
