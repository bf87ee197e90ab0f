package v1alpha1

import (
	"fmt"
	"net/url"
	"strconv"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("TerraformRun"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace", "status.phase":
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for TerraformRun; use metadata.name, metadata.namespace or status.phase", label)
			}
		})
}

// Convert_Slice_string_To_Pointer_int32 decodes an int32 query parameter, such
// as attempt, for the url.Values conversions of the options types: the first
// value, or nil without one. k8s.io/apimachinery/pkg/runtime has this
// function for int64 only.
func Convert_Slice_string_To_Pointer_int32(in *[]string, out **int32, s conversion.Scope) error {
	if len(*in) == 0 {
		*out = nil
		return nil
	}
	i, err := strconv.ParseInt((*in)[0], 10, 32)
	if err != nil {
		return err
	}
	v := int32(i)
	*out = &v
	return nil
}

// The query options types decode url.Values with the generated conversions,
// and these wrappers make them stricter than the generic ones in
// k8s.io/apimachinery/pkg/runtime: a boolean must be one that strconv.ParseBool
// accepts (runtime reads every value but "false" and "0" as true), and a
// number that does not parse is reported with its parameter's name. An error
// here is answered 400 Bad Request by the generic handler.

// Convert_url_Values_To_v1alpha1_TerraformRunLogOptions decodes the query of
// the logs subresource.
func Convert_url_Values_To_v1alpha1_TerraformRunLogOptions(in *url.Values, out *TerraformRunLogOptions, s conversion.Scope) error {
	if err := checkQuery(*in, []string{"follow"}, []string{"attempt"}, []string{"tailLines", "limitBytes"}); err != nil {
		return err
	}
	if err := autoConvert_url_Values_To_v1alpha1_TerraformRunLogOptions(in, out, s); err != nil {
		return err
	}
	out.Follow = queryBool(*in, "follow")
	return nil
}

// Convert_url_Values_To_v1alpha1_TerraformRunPlanOptions decodes the query of
// the plan subresource.
func Convert_url_Values_To_v1alpha1_TerraformRunPlanOptions(in *url.Values, out *TerraformRunPlanOptions, s conversion.Scope) error {
	if err := checkQuery(*in, []string{"wait"}, []string{"attempt"}, nil); err != nil {
		return err
	}
	if err := autoConvert_url_Values_To_v1alpha1_TerraformRunPlanOptions(in, out, s); err != nil {
		return err
	}
	out.Wait = queryBool(*in, "wait")
	return nil
}

// Convert_url_Values_To_v1alpha1_TerraformRunOutputsOptions decodes the query
// of the outputs subresource.
func Convert_url_Values_To_v1alpha1_TerraformRunOutputsOptions(in *url.Values, out *TerraformRunOutputsOptions, s conversion.Scope) error {
	if err := checkQuery(*in, nil, []string{"attempt"}, nil); err != nil {
		return err
	}
	return autoConvert_url_Values_To_v1alpha1_TerraformRunOutputsOptions(in, out, s)
}

// checkQuery returns an error naming the first parameter that does not parse:
// one of bools that is neither empty nor a boolean, or one of int32s or int64s
// that is not an integer of that size. Only the first value of a parameter is
// read, as the conversions do.
func checkQuery(q url.Values, bools, int32s, int64s []string) error {
	for _, key := range bools {
		if v := q.Get(key); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("invalid %s=%q: must be true or false", key, v)
			}
		}
	}
	for _, ints := range []struct {
		keys []string
		bits int
	}{{int32s, 32}, {int64s, 64}} {
		for _, key := range ints.keys {
			if vs, ok := q[key]; ok && len(vs) > 0 {
				if _, err := strconv.ParseInt(vs[0], 10, ints.bits); err != nil {
					return fmt.Errorf("invalid %s=%q: must be an integer", key, vs[0])
				}
			}
		}
	}
	return nil
}

// queryBool is the boolean that checkQuery accepted: false when empty or absent.
func queryBool(q url.Values, key string) bool {
	b, _ := strconv.ParseBool(q.Get(key))
	return b
}
