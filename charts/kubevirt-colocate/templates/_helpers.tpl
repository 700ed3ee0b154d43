{{/*
Labels of every object: the install's own (manifests/ puts app.kubernetes.io/part-of on each)
and Helm's usual ones.
*/}}
{{- define "kubevirt-colocate.labels" -}}
app.kubernetes.io/part-of: kubevirt-colocate
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The webhook's pods: the Deployment's selector, the Service's, the PDB's and the NetworkPolicy's. */}}
{{- define "kubevirt-colocate.selector" -}}
app.kubernetes.io/name: kubevirt-colocate
app.kubernetes.io/component: webhook
{{- end }}

{{/* The keeper's pods, likewise. */}}
{{- define "kubevirt-colocate.keeperSelector" -}}
app.kubernetes.io/name: kubevirt-colocate
app.kubernetes.io/component: keeper
{{- end }}

{{- define "kubevirt-colocate.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The server's own defaults (webhook/config.py, Settings). A value equal to its default gives no
flag, so the default install runs the same command line as manifests/; tests/test_chart.py holds
these to Settings.
*/}}
{{- define "kubevirt-colocate.serverDefaults" -}}
keepAfter: 600
keepAfterDescheduled: 21600
keepMaxInflight: 2
keepMaxPerDay: 2
pin: required
optInAnnotation: kubevirt-scheduler/co-schedule
longhornNamespace: longhorn-system
shareManagerRule: true
spareVMs: false
aimEvacuations: false
kubevirtNamespace: kubevirt
bodyBudgetMiB: 192
{{- end }}

{{/* The webhook's flags that the values set, beyond those its Deployment always has. */}}
{{- define "kubevirt-colocate.settingFlags" -}}
{{- $default := include "kubevirt-colocate.serverDefaults" . | fromYaml -}}
{{- $flags := list -}}
{{- if ne .Values.pin $default.pin -}}
{{- $flags = append $flags (printf "--pin=%s" .Values.pin) -}}
{{- end -}}
{{- $flags = concat $flags (include "kubevirt-colocate.diskFlags" . | fromYamlArray) -}}
{{- if not .Values.shareManagerRule -}}
{{- $flags = append $flags "--share-manager-rule=off" -}}
{{- end -}}
{{- if ne (int64 .Values.bodyBudgetMiB) (int64 $default.bodyBudgetMiB) -}}
{{- $flags = append $flags (printf "--body-budget=%d" (int64 .Values.bodyBudgetMiB)) -}}
{{- end -}}
{{- if .Values.aimEvacuations -}}
{{- $flags = append $flags "--aim-evacuations=on" -}}
{{- if ne .Values.kubevirtNamespace $default.kubevirtNamespace -}}
{{- $flags = append $flags (printf "--kubevirt-namespace=%s" .Values.kubevirtNamespace) -}}
{{- end -}}
{{- end -}}
{{- with $flags }}{{ toYaml . }}{{ end -}}
{{- end }}

{{/* The flags of both: which pods are opted in, and where Longhorn runs. */}}
{{- define "kubevirt-colocate.diskFlags" -}}
{{- $default := include "kubevirt-colocate.serverDefaults" . | fromYaml -}}
{{- $flags := list -}}
{{- if ne .Values.optInAnnotation $default.optInAnnotation -}}
{{- $flags = append $flags (printf "--opt-in-annotation=%s" .Values.optInAnnotation) -}}
{{- end -}}
{{- if ne .Values.longhorn.namespace $default.longhornNamespace -}}
{{- $flags = append $flags (printf "--longhorn-namespace=%s" .Values.longhorn.namespace) -}}
{{- end -}}
{{- toYaml $flags -}}
{{- end }}

{{/* The keeper's flags that the values set, beyond those its Deployment always has. */}}
{{- define "kubevirt-colocate.keeperFlags" -}}
{{- $default := include "kubevirt-colocate.serverDefaults" . | fromYaml -}}
{{- $flags := list -}}
{{- if ne (float64 .Values.keeper.after) (float64 $default.keepAfter) -}}
{{- $flags = append $flags (printf "--keep-after=%v" .Values.keeper.after) -}}
{{- end -}}
{{- if ne (float64 .Values.keeper.afterDescheduled) (float64 $default.keepAfterDescheduled) -}}
{{- $flags = append $flags (printf "--keep-after-descheduled=%v" .Values.keeper.afterDescheduled) -}}
{{- end -}}
{{- if ne (int64 .Values.keeper.maxInflight) (int64 $default.keepMaxInflight) -}}
{{- $flags = append $flags (printf "--keep-max-inflight=%d" (int64 .Values.keeper.maxInflight)) -}}
{{- end -}}
{{- if ne (int64 .Values.keeper.maxPerDay) (int64 $default.keepMaxPerDay) -}}
{{- $flags = append $flags (printf "--keep-max-per-day=%d" (int64 .Values.keeper.maxPerDay)) -}}
{{- end -}}
{{- $flags = concat $flags (include "kubevirt-colocate.diskFlags" . | fromYamlArray) -}}
{{- if .Values.longhorn.spareVMs -}}
{{- $flags = append $flags "--spare-vms=on" -}}
{{- end -}}
{{- with $flags }}{{ toYaml . }}{{ end -}}
{{- end }}

{{/* Pod-level placement that the webhook's, the keeper's and the certificate Job's pods share. */}}
{{- define "kubevirt-colocate.podPlacement" -}}
{{- $placement := dict -}}
{{- with .Values.imagePullSecrets }}{{ $_ := set $placement "imagePullSecrets" . }}{{ end -}}
{{- with .Values.priorityClassName }}{{ $_ := set $placement "priorityClassName" . }}{{ end -}}
{{- with .Values.nodeSelector }}{{ $_ := set $placement "nodeSelector" . }}{{ end -}}
{{- with .Values.tolerations }}{{ $_ := set $placement "tolerations" . }}{{ end -}}
{{- with $placement }}{{ toYaml . }}{{ end -}}
{{- end }}
