{{- define "brokergroup.fullname" -}}
{{- if contains "brokergroup" .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}{{- else -}}{{ printf "%s-brokergroup" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "brokergroup.labels" -}}
app.kubernetes.io/name: brokergroup
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "brokergroup.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "brokergroup.secretName" -}}
{{- if .Values.secrets.existingSecret -}}{{ .Values.secrets.existingSecret }}{{- else -}}{{ include "brokergroup.fullname" . }}-secrets{{- end -}}
{{- end -}}

{{/* The cluster CA Secret (tls.clusterCa): the operator's, or the user's own. */}}
{{- define "brokergroup.clusterCaSecret" -}}
{{- if .Values.tls.clusterCa.existingSecret -}}{{ .Values.tls.clusterCa.existingSecret }}{{- else -}}{{ include "brokergroup.fullname" . }}-cluster-ca{{- end -}}
{{- end -}}

{{/* The controllers' certificate Secret, kept by the operator (tls.controllers.mode). */}}
{{- define "brokergroup.controllerTlsSecret" -}}
{{ include "brokergroup.fullname" . }}-controller-tls
{{- end -}}

{{- define "brokergroup.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}{{ .Values.serviceAccount.name }}{{- else -}}{{ include "brokergroup.fullname" . }}{{- end -}}
{{- end -}}

{{/* Stable peer names of the controller StatefulSet: never pod IPs (DESIGN.md §2). */}}
{{- define "brokergroup.controllerHost" -}}
{{- $root := index . 0 -}}{{- $i := index . 1 -}}
{{ include "brokergroup.fullname" $root }}-controller-{{ $i }}.{{ include "brokergroup.fullname" $root }}-controller.{{ $root.Release.Namespace }}.svc.cluster.local
{{- end -}}

{{- define "brokergroup.controllerPeers" -}}
{{- $root := . -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.controller.replicas) -}}
{{- $peers = append $peers (printf "%s:%d" (include "brokergroup.controllerHost" (list $root $i)) (int $root.Values.controller.raftPort)) -}}
{{- end -}}
{{ join "," $peers }}
{{- end -}}

{{- define "brokergroup.controllerApis" -}}
{{- $root := . -}}
{{- $apis := list -}}
{{- range $i := until (int .Values.controller.replicas) -}}
{{- $apis = append $apis (printf "%s:%d" (include "brokergroup.controllerHost" (list $root $i)) (int $root.Values.controller.apiPort)) -}}
{{- end -}}
{{ join "," $apis }}
{{- end -}}

{{- define "brokergroup.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The namespaces the operator watches: "*" for every one, else a comma list
(the release namespace when none are given). */}}
{{- define "brokergroup.watchNamespaces" -}}
{{- if .Values.operator.clusterWide -}}*
{{- else if .Values.operator.watchNamespaces -}}{{ join "," .Values.operator.watchNamespaces }}
{{- else -}}{{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* Preferred (never required) anti-affinity by node for one component: a
one-node cluster still schedules every replica. */}}
{{- define "brokergroup.spreadOverNodes" -}}
{{- $root := index . 0 -}}{{- $component := index . 1 -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            app.kubernetes.io/instance: {{ $root.Release.Name }}
            app.kubernetes.io/component: {{ $component }}
{{- end -}}

{{/* The operator's rules on namespaced objects, the same in each Role and in the
ClusterRole. Secrets: create and (server-side apply) patch each group's
<group>-credentials; no get or list (docs/security.md says what patch still allows). */}}
{{- define "brokergroup.operatorRules" -}}
- apiGroups: ["brokergroup.io"]
  resources: ["brokergroups"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["brokergroup.io"]
  resources: ["brokergroups/status"]
  verbs: ["get", "patch"]
- apiGroups: ["brokergroup.io"]
  resources: ["brokergroupusers"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["brokergroup.io"]
  resources: ["brokergroupusers/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "patch"]
# spec.tls issuer cert-manager: the group's Certificate, and its status (revision, notAfter).
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}
