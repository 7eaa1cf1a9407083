{{/* Names. */}}
{{- define "taskgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "taskgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "taskgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taskgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "taskgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "taskgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "taskgate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.mode" -}}
{{- if not (has .Values.mode (list "standalone" "sidecar")) -}}
{{- fail (printf "mode must be standalone or sidecar, not %q" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{- define "taskgate.listen" -}}
{{- $default := ternary "0.0.0.0" "127.0.0.1" (eq (include "taskgate.mode" .) "standalone") -}}
{{- printf "%s:%v" (default $default .Values.listenAddress) (int .Values.port) -}}
{{- end -}}

{{/* The address of /metrics and /healthz (server.metrics_listen), or "" when they stay on `port`. */}}
{{- define "taskgate.metricsListen" -}}
{{- if .Values.metricsPort -}}
{{- if eq (int .Values.metricsPort) (int .Values.port) -}}
{{- fail (printf "metricsPort (%v) must differ from port (%v); 0 keeps /metrics on port" .Values.metricsPort .Values.port) -}}
{{- end -}}
{{- printf "%s:%v" (default "0.0.0.0" .Values.metricsListenAddress) (int .Values.metricsPort) -}}
{{- end -}}
{{- end -}}

{{/* The container port of the probes: the metrics port when there is one (the kubelet
reaches it in every mode, a sidecar on 127.0.0.1 included), else the MCP port. */}}
{{- define "taskgate.probePort" -}}
{{- ternary "metrics" "http" (ne (include "taskgate.metricsListen" .) "") -}}
{{- end -}}

{{- define "taskgate.probesEnabled" -}}
{{- if kindIs "invalid" .Values.probes.enabled -}}
{{- /* A sidecar bound to 127.0.0.1 can be probed on its metrics port only. */ -}}
{{- ternary "true" "" (or (eq (include "taskgate.mode" .) "standalone") (ne (include "taskgate.metricsListen" .) "")) -}}
{{- else if .Values.probes.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when taskgate's listen address is loopback (it then serves its own pod only). */}}
{{- define "taskgate.listenIsLoopback" -}}
{{- $host := default (ternary "0.0.0.0" "127.0.0.1" (eq (include "taskgate.mode" .) "standalone")) .Values.listenAddress -}}
{{- if or (hasPrefix "127." $host) (has $host (list "::1" "[::1]" "localhost")) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when HTTP callers must authenticate: bearer tokens or OAuth. */}}
{{- define "taskgate.authConfigured" -}}
{{- $auth := (get (.Values.config | default dict) "auth") | default dict -}}
{{- if or .Values.auth.bearer (get $auth "oauth") -}}
true
{{- end -}}
{{- end -}}

{{/*
No anonymous callers from the network: a listen address other pods can reach needs
bearer tokens or OAuth (taskgate itself refuses to serve it anonymously).
*/}}
{{- define "taskgate.requireAuth" -}}
{{- if and (not (include "taskgate.listenIsLoopback" .)) (not (include "taskgate.authConfigured" .)) -}}
{{- fail (printf "taskgate would listen on %s, where other pods reach it, with no way to tell callers apart: set auth.bearer (tokens in auth.existingSecret) or config.auth.oauth. Anonymous callers are served on loopback only (mode=sidecar)." (include "taskgate.listen" .)) -}}
{{- end -}}
{{- end -}}

{{/* Engines of kind kubernetes that use the pod's ServiceAccount (no kubeconfig). */}}
{{- define "taskgate.usesServiceAccountToken" -}}
{{- $uses := false -}}
{{- range $name, $engine := ((.Values.config | default dict).engines | default dict) -}}
{{- if and (kindIs "map" $engine) (eq (toString (get $engine "kind")) "kubernetes") (not (get $engine "kubeconfig")) -}}
{{- $uses = true -}}
{{- end -}}
{{- end -}}
{{- if $uses -}}true{{- end -}}
{{- end -}}

{{/* "true" when an engine or the OAuth issuers are reached over HTTPS outside the cluster. */}}
{{- define "taskgate.needsHttpsEgress" -}}
{{- $egress := .Values.networkPolicy.egress -}}
{{- $needs := false -}}
{{- if kindIs "invalid" $egress.https -}}
{{- range $name, $engine := ((.Values.config | default dict).engines | default dict) -}}
{{- if and (kindIs "map" $engine) (has (toString (get $engine "kind")) (list "stepfunctions" "github" "airflow")) -}}
{{- $needs = true -}}
{{- end -}}
{{- end -}}
{{- if get ((get (.Values.config | default dict) "auth") | default dict) "oauth" -}}
{{- $needs = true -}}
{{- end -}}
{{- else if $egress.https -}}
{{- $needs = true -}}
{{- end -}}
{{- if $needs -}}true{{- end -}}
{{- end -}}

{{/* Paths inside the container. */}}
{{- define "taskgate.keysDir" -}}/run/secrets/taskgate/keys{{- end -}}
{{- define "taskgate.tokensDir" -}}/run/secrets/taskgate/tokens{{- end -}}

{{/*
Refuses values that would put a secret into the ConfigMap: a key or token written
inline anywhere under `config`.
*/}}
{{- define "taskgate.noSecrets" -}}
{{- $path := index . 0 -}}
{{- $v := index . 1 -}}
{{- if kindIs "map" $v -}}
{{- range $k, $val := $v -}}
{{- if has $k (list "dev_secret" "secret" "token" "client_secret" "private_key" "password") -}}
{{- fail (printf "%s.%s: secrets do not belong in values; put them in a Secret (see keys, auth, env, secretMounts)" $path $k) -}}
{{- end -}}
{{- include "taskgate.noSecrets" (list (printf "%s.%s" $path $k) $val) -}}
{{- end -}}
{{- else if kindIs "slice" $v -}}
{{- range $i, $val := $v -}}
{{- include "taskgate.noSecrets" (list (printf "%s[%d]" $path $i) $val) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
TOML rendering of values. Helm reads numbers as floats: a number without a fraction
is written as an integer (taskgate's integer settings need that). Strings are JSON
strings, which are valid TOML basic strings. Maps become inline tables.
*/}}
{{- define "taskgate.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "taskgate.toml.value" -}}
{{- $v := . -}}
{{- if kindIs "map" $v -}}
{{- $parts := list -}}
{{- range $k, $val := $v -}}
{{- if not (kindIs "invalid" $val) -}}
{{- $parts = append $parts (printf "%s = %s" (include "taskgate.toml.key" $k) (include "taskgate.toml.value" $val)) -}}
{{- end -}}
{{- end -}}
{{- if $parts -}}{ {{ join ", " $parts }} }{{- else -}}{}{{- end -}}
{{- else if kindIs "slice" $v -}}
{{- $parts := list -}}
{{- range $val := $v -}}
{{- $parts = append $parts (include "taskgate.toml.value" $val) -}}
{{- end -}}
[{{ join ", " $parts }}]
{{- else if kindIs "string" $v -}}
{{- toJson $v -}}
{{- else if kindIs "bool" $v -}}
{{- ternary "true" "false" $v -}}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq ($v | float64) (($v | int64) | float64) -}}
{{- printf "%d" ($v | int64) -}}
{{- else -}}
{{- toJson $v -}}
{{- end -}}
{{- else if kindIs "invalid" $v -}}
{{- fail "null has no TOML form" -}}
{{- else -}}
{{- printf "%v" $v -}}
{{- end -}}
{{- end -}}

{{/* One TOML table: scalar keys, then sub-tables as [name.sub], arrays of tables as [[name]]. */}}
{{- define "taskgate.toml.table" -}}
{{- $name := index . 0 -}}
{{- $table := index . 1 -}}
{{- if $name }}
[{{ $name }}]
{{- end -}}
{{- range $k, $v := $table -}}
{{- if not (kindIs "invalid" $v) }}
{{ include "taskgate.toml.key" $k }} = {{ include "taskgate.toml.value" $v }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The whole taskgate.toml. */}}
{{- define "taskgate.configToml" -}}
{{- include "taskgate.noSecrets" (list "config" .Values.config) -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- if hasKey $config "keys" -}}
{{- fail "config.keys: set keys.existingSecret and keys.ids instead (keys come from a Secret)" -}}
{{- end -}}
{{- $server := (get $config "server") | default dict -}}
{{- $_ := set $server "listen" (include "taskgate.listen" .) -}}
{{- if include "taskgate.metricsListen" . -}}
{{- $_ = set $server "metrics_listen" (include "taskgate.metricsListen" .) -}}
{{- end -}}
{{- $_ = set $config "server" $server -}}
{{- $seal := list -}}
{{- range $id := (required "keys.ids must name at least one key" .Values.keys.ids) -}}
{{- $seal = append $seal (dict "id" $id "secret_file" (printf "%s/%s" (include "taskgate.keysDir" $) $id)) -}}
{{- end -}}
{{- $_ = required "keys.existingSecret must name the Secret of the seal keys" .Values.keys.existingSecret -}}
{{- $auth := (get $config "auth") | default dict -}}
{{- if hasKey $auth "bearer" -}}
{{- fail "config.auth.bearer: set auth.bearer (caller, secretKey) and auth.existingSecret instead" -}}
{{- end -}}
{{- if .Values.auth.bearer -}}
{{- $_ = required "auth.existingSecret must name the Secret of the bearer tokens" .Values.auth.existingSecret -}}
{{- $bearer := list -}}
{{- range $b := .Values.auth.bearer -}}
{{- $bearer = append $bearer (dict "caller" (required "auth.bearer[].caller is required" $b.caller) "token_file" (printf "%s/%s" (include "taskgate.tokensDir" $) (required "auth.bearer[].secretKey is required" $b.secretKey))) -}}
{{- end -}}
{{- $_ = set $auth "bearer" $bearer -}}
{{- $_ = set $config "auth" $auth -}}
{{- end -}}
{{- include "taskgate.requireAuth" . -}}
# taskgate.toml, made by the taskgate Helm chart from its values.
{{- include "taskgate.toml.table" (list "server" $server) }}
{{ include "taskgate.toml.table" (list "keys" (dict "seal" $seal)) }}
{{- range $section, $value := $config -}}
{{- if and (ne $section "server") (ne $section "tools") (kindIs "map" $value) -}}
{{- if eq $section "engines" -}}
{{- range $engine, $settings := $value }}
{{ include "taskgate.toml.table" (list (printf "engines.%s" (include "taskgate.toml.key" $engine)) $settings) }}
{{- end -}}
{{- else }}
{{ include "taskgate.toml.table" (list $section $value) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $tool := $config.tools }}

[[tools]]
{{- include "taskgate.toml.table" (list "" $tool) }}
{{- end }}
{{ end -}}

{{/* The taskgate container (Deployment and sidecar alike). */}}
{{- define "taskgate.container" -}}
name: taskgate
image: {{ include "taskgate.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if not (has .Values.logFormat (list "json" "text")) }}
{{- fail (printf "logFormat: %q is neither json nor text" .Values.logFormat) }}
{{- end }}
args: ["--log-format", {{ .Values.logFormat | quote }}, "serve", "--config", "/etc/taskgate/taskgate.toml"]
ports:
- name: http
  containerPort: {{ int .Values.port }}
  protocol: TCP
{{- if include "taskgate.metricsListen" . }}
- name: metrics
  containerPort: {{ int .Values.metricsPort }}
  protocol: TCP
{{- end }}
env:
# The pod's name and namespace, for the trace resource ([telemetry]:
# k8s.pod.name, k8s.namespace.name).
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- with .Values.env }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- with .Values.envFrom }}
envFrom:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- if include "taskgate.probesEnabled" . }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ include "taskgate.probePort" . }}}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /healthz, port: {{ include "taskgate.probePort" . }}}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- $sc := deepCopy .Values.securityContext -}}
  {{- if eq (include "taskgate.mode" .) "sidecar" -}}
  {{- /* The pod's security context is the host pod's own: state the user here. */ -}}
  {{- $sc = merge $sc (pick .Values.podSecurityContext "runAsNonRoot" "runAsUser" "runAsGroup") -}}
  {{- end }}
  {{- toYaml $sc | nindent 2 }}
volumeMounts:
- {name: taskgate-config, mountPath: /etc/taskgate, readOnly: true}
- {name: taskgate-keys, mountPath: {{ include "taskgate.keysDir" . }}, readOnly: true}
{{- if .Values.auth.bearer }}
- {name: taskgate-tokens, mountPath: {{ include "taskgate.tokensDir" . }}, readOnly: true}
{{- end }}
{{- /* The emptyDir is group- and world-writable (fsGroup), which the exec engine
       refuses as its spool: it is mounted one level up, and taskgate creates
       its spool folder (mode 0700) inside. */}}
- {name: taskgate-spool, mountPath: /var/lib/taskgate}
{{- range .Values.secretMounts }}
- {name: {{ .name }}, mountPath: {{ .mountPath }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* The volumes the container mounts. */}}
{{- define "taskgate.volumes" -}}
- name: taskgate-config
  configMap:
    name: {{ include "taskgate.fullname" . }}
    items:
    - {key: taskgate.toml, path: taskgate.toml}
    {{- range $name, $_ := .Values.jobTemplates }}
    - {key: {{ printf "job-%s.yaml" $name }}, path: {{ printf "jobs/%s.yaml" $name }}}
    {{- end }}
- name: taskgate-keys
  secret:
    secretName: {{ .Values.keys.existingSecret }}
    defaultMode: 0400
- name: taskgate-spool
  emptyDir:
    sizeLimit: {{ .Values.spool.sizeLimit }}
{{- if .Values.auth.bearer }}
- name: taskgate-tokens
  secret:
    secretName: {{ .Values.auth.existingSecret }}
    defaultMode: 0400
{{- end }}
{{- range .Values.secretMounts }}
- name: {{ .name }}
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{/* For charts depending on this one: the container and volumes of a sidecar. */}}
{{- define "taskgate.sidecar" -}}
containers:
- {{ include "taskgate.container" . | indent 2 | trim }}
volumes:
{{- include "taskgate.volumes" . | nindent 0 }}
{{- end -}}

{{/* The pods' topologySpreadConstraints (a YAML list, or "" for none): across zones
and across nodes, each counting the release's pods by the selector labels (and
pod-template-hash, so a rollout's new pods spread among themselves), then `extra`. */}}
{{- define "taskgate.topologySpreadConstraints" -}}
{{- $t := .Values.topologySpread -}}
{{- if $t.enabled -}}
{{- if ne (include "taskgate.mode" .) "standalone" -}}
{{- fail "topologySpread places the standalone Deployment's pods: as a sidecar, set it on your own pod" -}}
{{- end -}}
{{- $selector := include "taskgate.selectorLabels" . -}}
{{- range $name, $key := dict "zone" "topology.kubernetes.io/zone" "hostname" "kubernetes.io/hostname" }}
{{- $c := get $t $name }}
{{- if $c.enabled }}
- topologyKey: {{ $key }}
  maxSkew: {{ int $c.maxSkew }}
  whenUnsatisfiable: {{ $c.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- $selector | nindent 6 }}
  matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end }}
{{- with $t.extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
{{- end -}}
