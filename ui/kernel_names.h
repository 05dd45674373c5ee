// Short display names for kernels: the timeline labels boxes with "gemv_kernel", not with
// "void sl::(anonymous namespace)::gemv_kernel<4, __nv_bfloat16, ...>(sl::(anonymous ...)".
#pragma once
#include <string>
#include <string_view>

namespace sl::ui {

// The function's own name: without return type, scope, template arguments and parameters.
// Names that are not C++ signatures ("nvjet_sm90_tst_...", "Memcpy HtoD") come back unchanged.
std::string short_kernel_name(std::string_view full);

}  // namespace sl::ui
