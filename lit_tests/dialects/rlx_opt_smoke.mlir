// RUN: rlx-opt %s | filecheck %s
// RUN: rlx-opt - < %s | filecheck %s

// CHECK: "test.op"() : () -> ()
"test.op"() : () -> ()
