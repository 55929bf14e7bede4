// The fake Objective-C runtime and Metal framework (see fake_objc.h): objects, classes, selectors, reference counts
// and autorelease pools, the objc_msgSend trampoline, and the Metal classes' methods as typed C++ functions.
#include "fake_objc.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "fake_metal_exec.h"

#include <unistd.h>

#define TG_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace tg::metal::fake {
namespace {

using id = void*;
using SEL = const char*;
using NSUInteger = unsigned long;
using NSInteger = long;
struct MTLSize {
  NSUInteger width, height, depth;
};

struct Class {
  std::string name;
  std::unordered_map<SEL, void*> methods;        // instance methods
  std::unordered_map<SEL, void*> class_methods;  // sent to the class itself
};

struct Obj {
  const Class* cls = nullptr;
  long refs = 1;
  virtual ~Obj() = default;
};

struct State {
  std::recursive_mutex mu;
  Config cfg;
  bool installed = false;
  std::set<std::string> selectors;  // interned: a SEL is the address of its name here
  std::unordered_map<std::string, std::unique_ptr<Class>> classes;
  std::unordered_set<const void*> class_ptrs;
  std::unordered_set<Obj*> live;
  std::vector<std::string> violations;
  std::vector<Dispatch> dispatches;
  std::uint64_t messages = 0, committed = 0, memory_used = 0;
  double clock = 0;
  std::map<std::string, std::pair<long, int>> failures;  // what -> (code, count)
};

State& st() {
  static State* s = new State;  // never destroyed: objects may be released during interpreter teardown
  return *s;
}

// Autorelease pools belong to a thread, as Objective-C's do (tinygrad compiles kernels on several threads at once).
thread_local std::vector<std::vector<Obj*>> t_pools;

// Every handler that touches the shared state holds this (recursive: handlers call each other's helpers).
#define FAKE_LOCK std::lock_guard<std::recursive_mutex> fake_lock(st().mu)

SEL intern(const std::string& name) { return st().selectors.insert(name).first->c_str(); }

void violation(const std::string& what) {
  FAKE_LOCK;
  st().violations.push_back(what);
}

bool take_failure(const std::string& what, long* code) {
  FAKE_LOCK;
  auto it = st().failures.find(what);
  if (it == st().failures.end() || it->second.second <= 0) return false;
  *code = it->second.first;
  if (--it->second.second == 0) st().failures.erase(it);
  return true;
}

template <class T>
T* make(const char* cls) {
  FAKE_LOCK;
  T* o = new T;
  o->cls = st().classes.at(cls).get();
  st().live.insert(o);
  return o;
}

void destroy(Obj* o);

void release(Obj* o) {
  if (o == nullptr) return;
  FAKE_LOCK;
  if (!st().live.count(o)) {
    violation("release of a freed object");
    return;
  }
  if (--o->refs == 0) destroy(o);
}

void retain(Obj* o) {
  FAKE_LOCK;
  if (o != nullptr) ++o->refs;
}

Obj* autorelease(Obj* o) {
  if (t_pools.empty()) violation(o->cls->name + " autoreleased with no autorelease pool in place (it leaks)");
  else t_pools.back().push_back(o);
  return o;
}

// The object `x` as a T, or a violation naming the argument (`what`) and nullptr.
template <class T>
T* as(id x, const char* what, bool nil_ok = false) {
  FAKE_LOCK;
  if (x == nullptr) {
    if (!nil_ok) violation(std::string(what) + " is nil");
    return nullptr;
  }
  Obj* o = static_cast<Obj*>(x);
  if (!st().live.count(o)) {
    violation(std::string(what) + " is not a live object");
    return nullptr;
  }
  T* t = dynamic_cast<T*>(o);
  if (t == nullptr) violation(std::string(what) + " is a " + o->cls->name + ", not the class expected");
  return t;
}

// ---- Foundation ----
struct NSString : Obj {
  std::string text;
};
NSString* new_string(const std::string& text) {
  NSString* s = make<NSString>("NSString");
  s->text = text;
  return s;
}
struct NSError : Obj {
  NSString* domain = nullptr;
  NSString* description = nullptr;
  long code = 0;
  ~NSError() override {
    release(domain);
    release(description);
  }
};
NSError* new_error(const std::string& domain, long code, const std::string& description) {
  NSError* e = make<NSError>("NSError");
  e->domain = new_string(domain);
  e->description = new_string(description);
  e->code = code;
  return e;
}
struct DispatchData : Obj {
  std::string bytes;
};

// ---- Metal ----
struct CompileOptions : Obj {
  bool fast_math = true;
};
struct Buffer : Obj {
  void* memory = nullptr;
  size_t length = 0;
  bool owned = true;
  ~Buffer() override {
    if (owned) {
      std::free(memory);
      st().memory_used -= length;
    }
  }
};
struct Library : Obj {
  std::shared_ptr<HostLibrary> lib;
};
struct Function : Obj {
  std::shared_ptr<HostLibrary> lib;
  const HostKernel* kernel = nullptr;
};
struct Pipeline : Obj {
  std::shared_ptr<HostLibrary> lib;
  const HostKernel* kernel = nullptr;
  bool icb = false;  // made able to go into an indirect command buffer
};
struct PipelineDescriptor : Obj {
  Function* function = nullptr;  // retained
  bool icb = false;
  ~PipelineDescriptor() override;
};
struct ICBDescriptor : Obj {
  NSUInteger types = 0, max_bindings = 0;
  bool inherit_buffers = true, inherit_pipeline = true;
};
struct Binding {
  Buffer* buffer = nullptr;  // retained while recorded
  size_t offset = 0;
  std::string bytes;
  bool set = false;
};
struct Recorded {
  Pipeline* pipeline = nullptr;  // retained while recorded
  Binding bindings[31];
  unsigned grid[3], block[3];
};
struct ICB;
struct IndirectCommand : Obj {
  ICB* icb = nullptr;  // owned by its ICB (+0 to the caller)
  Recorded cmd;        // pipeline and buffers retained
  bool encoded = false, barrier = false;
  ~IndirectCommand() override;
};
struct ICB : Obj {
  NSUInteger max_bindings = 0;
  std::vector<IndirectCommand*> commands;
  ~ICB() override;
};
struct CommandBuffer;
struct Encoder : Obj {
  CommandBuffer* cb = nullptr;
  Pipeline* pipeline = nullptr;
  Binding bindings[31];
  std::vector<Buffer*> resources;  // useResource:usage:
  bool ended = false;
};
struct Execution {
  ICB* icb = nullptr;  // retained while recorded
  size_t count = 0;
  std::vector<Buffer*> resources;  // what useResource: declared
};
struct CommandBuffer : Obj {
  NSUInteger status = 0;  // MTLCommandBufferStatus: 0 not enqueued, 2 committed, 4 completed, 5 error
  std::vector<Recorded> commands;
  std::vector<std::pair<size_t, Execution>> executions;  // ICB runs, after commands[0, first)
  bool encoding = false;
  NSError* error = nullptr;
  double start = 0, end = 0;
  ~CommandBuffer() override {
    for (Recorded& r : commands) {
      release(r.pipeline);
      for (Binding& b : r.bindings) release(b.buffer);
    }
    for (auto& e : executions) release(e.second.icb);
    release(error);
  }
};
struct Queue : Obj {};
struct Device : Obj {
  NSString* name = nullptr;
  ~Device() override { release(name); }
};

void destroy(Obj* o) {
  FAKE_LOCK;
  st().live.erase(o);
  delete o;
}
PipelineDescriptor::~PipelineDescriptor() { release(function); }
IndirectCommand::~IndirectCommand() {
  release(cmd.pipeline);
  for (Binding& b : cmd.bindings) release(b.buffer);
}
ICB::~ICB() {
  for (IndirectCommand* c : commands) release(c);
}

// ---- NSObject ----
id m_retain(Obj* self, SEL) {
  retain(self);
  return self;
}
void m_release(Obj* self, SEL) {
  if (self->refs <= 0) violation("over-release of a " + self->cls->name);
  else release(self);
}
id m_autorelease(Obj* self, SEL) { return autorelease(self); }
NSUInteger m_retainCount(Obj* self, SEL) { return NSUInteger(self->refs); }
id c_alloc(Class* cls, SEL);
id m_init(Obj* self, SEL) { return self; }

// ---- NSString, NSError ----
id c_stringWithUTF8String(Class*, SEL, const char* text) {
  if (text == nullptr) {
    violation("stringWithUTF8String: got NULL");
    return nullptr;
  }
  return autorelease(new_string(text));
}
const char* m_UTF8String(NSString* self, SEL) { return self->text.c_str(); }
id m_domain(NSError* self, SEL) { return self->domain; }
id m_localizedDescription(NSError* self, SEL) { return self->description; }
NSInteger m_code(NSError* self, SEL) { return self->code; }

// ---- MTLCompileOptions ----
void m_setFastMathEnabled(CompileOptions* self, SEL, bool on) { self->fast_math = on; }

// ---- MTLDevice ----
id m_name(Device* self, SEL) { return self->name; }
id m_newCommandQueue(Device*, SEL, NSUInteger) { return make<Queue>("MTLCommandQueue"); }
NSUInteger m_maxThreadgroupMemoryLength(Device*, SEL) { return 32768; }
// an Apple7 GPU (M1), or with cfg.icb off an Apple3 one, which has neither compute ICBs nor simdgroup_matrix
bool m_supportsFamily(Device*, SEL, NSInteger family) {
  if (family >= 1001 && family <= 1007) return st().cfg.icb || family < 1004;
  return st().cfg.icb && family == 2002;
}
id m_newBuffer(Device*, SEL, NSUInteger length, NSUInteger options) {
  if (options != 0) violation("newBufferWithLength:options: with options " + std::to_string(options));
  long code;
  if (take_failure("buffer", &code) || st().memory_used + length > st().cfg.memory_bytes) return nullptr;
  Buffer* b = make<Buffer>("MTLBuffer");
  b->length = length;
  b->memory = std::aligned_alloc(16384, (length + 16383) / 16384 * 16384);
  std::memset(b->memory, 0, length);
  st().memory_used += length;
  return b;
}
id m_newBufferNoCopy(Device*, SEL, void* bytes, NSUInteger length, NSUInteger, void* deallocator) {
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<std::uintptr_t>(bytes) % page != 0 || length % page != 0)
    violation("newBufferWithBytesNoCopy: memory not page-aligned");
  if (deallocator != nullptr) violation("newBufferWithBytesNoCopy: a deallocator block is not supported by the fake");
  Buffer* b = make<Buffer>("MTLBuffer");
  b->memory = bytes;
  b->length = length;
  b->owned = false;
  return b;
}

id library_from(const std::string& source, id* error) {
  long code;
  std::string log;
  std::shared_ptr<HostLibrary> lib;
  if (take_failure("library", &code)) log = "program_source:1:1: error: injected compile failure";
  else lib = build_library(st().cfg, source, &log);
  if (!lib) {
    if (error == nullptr) violation("a library build failed and no error out-parameter was given");
    else *error = autorelease(new_error("MTLLibraryErrorDomain", 3, "Compilation failed: \n\n" + log));
    return nullptr;
  }
  Library* l = make<Library>("MTLLibrary");
  l->lib = std::move(lib);
  return l;
}
id m_newLibraryWithSource(Device*, SEL, id source, id options, id* error) {
  NSString* s = as<NSString>(source, "newLibraryWithSource: source");
  as<CompileOptions>(options, "newLibraryWithSource: options", true);
  return s ? library_from(s->text, error) : nullptr;
}
id m_newLibraryWithData(Device*, SEL, id data, id* error) {
  DispatchData* d = as<DispatchData>(data, "newLibraryWithData: data");
  if (d == nullptr) return nullptr;
  // the fake's metallib: "MTLB" and the MSL source
  if (d->bytes.compare(0, 4, "MTLB") != 0) {
    *error = autorelease(new_error("MTLLibraryErrorDomain", 2, "Invalid library file"));
    return nullptr;
  }
  return library_from(d->bytes.substr(4), error);
}
id m_newComputePipelineState(Device*, SEL, id function, id* error) {
  Function* f = as<Function>(function, "newComputePipelineStateWithFunction: function");
  if (error == nullptr) violation("newComputePipelineStateWithFunction:error: without an error out-parameter");
  if (f == nullptr) return nullptr;
  Pipeline* p = make<Pipeline>("MTLComputePipelineState");
  p->lib = f->lib;
  p->kernel = f->kernel;
  return p;
}

id m_newComputePipelineStateWithDescriptor(Device*, SEL, id descriptor, NSUInteger, id* reflection, id* error) {
  PipelineDescriptor* d = as<PipelineDescriptor>(descriptor, "newComputePipelineStateWithDescriptor: descriptor");
  if (error == nullptr) violation("newComputePipelineStateWithDescriptor: without an error out-parameter");
  if (reflection != nullptr) violation("newComputePipelineStateWithDescriptor: reflection is not supported by the fake");
  if (d == nullptr || d->function == nullptr) {
    violation("newComputePipelineStateWithDescriptor: no compute function set");
    return nullptr;
  }
  Pipeline* p = make<Pipeline>("MTLComputePipelineState");
  p->lib = d->function->lib;
  p->kernel = d->function->kernel;
  p->icb = d->icb;
  return p;
}
void m_setComputeFunction(PipelineDescriptor* self, SEL, id function) {
  Function* f = as<Function>(function, "setComputeFunction: function");
  retain(f);
  release(self->function);
  self->function = f;
}
void m_setSupportIndirectCommandBuffers(PipelineDescriptor* self, SEL, bool on) { self->icb = on; }
void m_setCommandTypes(ICBDescriptor* self, SEL, NSUInteger types) { self->types = types; }
void m_setInheritBuffers(ICBDescriptor* self, SEL, bool on) { self->inherit_buffers = on; }
void m_setInheritPipelineState(ICBDescriptor* self, SEL, bool on) { self->inherit_pipeline = on; }
void m_setMaxKernelBufferBindCount(ICBDescriptor* self, SEL, NSUInteger n) { self->max_bindings = n; }
id m_newIndirectCommandBuffer(Device*, SEL, id descriptor, NSUInteger count, NSUInteger options) {
  ICBDescriptor* d = as<ICBDescriptor>(descriptor, "newIndirectCommandBufferWithDescriptor: descriptor");
  if (d == nullptr) return nullptr;
  if (!st().cfg.icb) violation("an indirect command buffer on a GPU without compute ICBs");
  if (d->types != 32) violation("the fake's ICBs hold concurrent dispatches only (MTLIndirectCommandTypeConcurrentDispatch)");
  if (d->inherit_buffers || d->inherit_pipeline) violation("the fake's ICB commands inherit nothing");
  if (options != 0) violation("newIndirectCommandBufferWithDescriptor: options other than shared storage");
  ICB* icb = make<ICB>("MTLIndirectCommandBuffer");
  icb->max_bindings = d->max_bindings;
  for (NSUInteger i = 0; i < count; ++i) {
    IndirectCommand* c = make<IndirectCommand>("MTLIndirectComputeCommand");
    c->icb = icb;
    icb->commands.push_back(c);
  }
  return icb;
}

// ---- MTLIndirectCommandBuffer, MTLIndirectComputeCommand ----
id m_indirectComputeCommandAtIndex(ICB* self, SEL, NSUInteger index) {
  if (index < self->commands.size()) return self->commands[index];
  violation("indirectComputeCommandAtIndex: " + std::to_string(index) + " past the ICB's commands");
  return nullptr;
}
void m_icmd_setPipeline(IndirectCommand* self, SEL, id pipeline) {
  Pipeline* p = as<Pipeline>(pipeline, "indirect setComputePipelineState: pipeline");
  if (p != nullptr && !p->icb) violation("a pipeline not made with supportIndirectCommandBuffers in an ICB command");
  retain(p);
  release(self->cmd.pipeline);
  self->cmd.pipeline = p;
}
void m_icmd_setKernelBuffer(IndirectCommand* self, SEL, id buffer, NSUInteger offset, NSUInteger index) {
  Buffer* b = as<Buffer>(buffer, "setKernelBuffer:offset:atIndex: buffer");
  if (index >= self->icb->max_bindings) {
    violation("setKernelBuffer:offset:atIndex: index past the ICB's maxKernelBufferBindCount");
    return;
  }
  if (b != nullptr && offset > b->length) violation("setKernelBuffer:offset:atIndex: offset past the buffer's end");
  retain(b);
  release(self->cmd.bindings[index].buffer);
  self->cmd.bindings[index] = {b, offset, {}, true};
}
void m_icmd_dispatch(IndirectCommand* self, SEL, MTLSize grid, MTLSize block) {
  unsigned g[3] = {unsigned(grid.width), unsigned(grid.height), unsigned(grid.depth)};
  unsigned b[3] = {unsigned(block.width), unsigned(block.height), unsigned(block.depth)};
  std::memcpy(self->cmd.grid, g, sizeof(g));
  std::memcpy(self->cmd.block, b, sizeof(b));
  self->encoded = true;
}
void m_icmd_setBarrier(IndirectCommand* self, SEL) { self->barrier = true; }

// ---- MTLLibrary, MTLComputePipelineState ----
id m_newFunctionWithName(Library* self, SEL, id name) {
  NSString* s = as<NSString>(name, "newFunctionWithName: name");
  const HostKernel* k = s ? self->lib->find(s->text) : nullptr;
  if (k == nullptr) return nullptr;
  Function* f = make<Function>("MTLFunction");
  f->lib = self->lib;
  f->kernel = k;
  return f;
}
NSUInteger m_maxTotalThreads(Pipeline*, SEL) { return st().cfg.max_threads; }
NSUInteger m_threadExecutionWidth(Pipeline*, SEL) { return 32; }

// ---- MTLBuffer ----
void* m_contents(Buffer* self, SEL) { return self->memory; }
NSUInteger m_length(Buffer* self, SEL) { return self->length; }

// ---- MTLCommandQueue, MTLCommandBuffer, MTLComputeCommandEncoder ----
id m_commandBuffer(Queue*, SEL) { return autorelease(make<CommandBuffer>("MTLCommandBuffer")); }
id m_computeCommandEncoder(CommandBuffer* self, SEL) {
  if (self->status != 0) violation("computeCommandEncoder on a committed command buffer");
  if (self->encoding) violation("computeCommandEncoder while another encoder of the command buffer is open");
  Encoder* e = make<Encoder>("MTLComputeCommandEncoder");
  e->cb = self;
  self->encoding = true;
  return autorelease(e);
}
bool check_slot(Encoder* self, NSUInteger index, const char* what) {
  if (self->ended) violation(std::string(what) + " after endEncoding");
  if (index < 31) return true;
  violation(std::string(what) + " index " + std::to_string(index) + " past the 31 buffer slots");
  return false;
}
void m_setComputePipelineState(Encoder* self, SEL, id pipeline) {
  self->pipeline = as<Pipeline>(pipeline, "setComputePipelineState: pipeline");
}
void m_setBuffer(Encoder* self, SEL, id buffer, NSUInteger offset, NSUInteger index) {
  Buffer* b = as<Buffer>(buffer, "setBuffer:offset:atIndex: buffer");
  if (!check_slot(self, index, "setBuffer:offset:atIndex:") || b == nullptr) return;
  if (offset > b->length) violation("setBuffer:offset:atIndex: offset past the buffer's end");
  self->bindings[index] = {b, offset, {}, true};
}
void m_setBytes(Encoder* self, SEL, const void* bytes, NSUInteger length, NSUInteger index) {
  if (!check_slot(self, index, "setBytes:length:atIndex:")) return;
  if (length > 4096) violation("setBytes:length:atIndex: takes at most 4 KB");
  self->bindings[index] = {nullptr, 0, std::string(static_cast<const char*>(bytes), length), true};
}
void m_dispatch(Encoder* self, SEL, MTLSize grid, MTLSize block) {
  if (self->ended) return violation("dispatchThreadgroups after endEncoding");
  if (self->pipeline == nullptr) return violation("dispatchThreadgroups with no pipeline state set");
  if (block.width * block.height * block.depth > st().cfg.max_threads)
    return violation("dispatchThreadgroups with more threads per threadgroup than the pipeline allows");
  if (grid.width * grid.height * grid.depth == 0 || block.width * block.height * block.depth == 0)
    return violation("dispatchThreadgroups with a zero size");
  Recorded r;
  r.pipeline = self->pipeline;
  retain(r.pipeline);
  for (int i = 0; i < 31; ++i) {
    r.bindings[i] = self->bindings[i];
    retain(r.bindings[i].buffer);
  }
  unsigned g[3] = {unsigned(grid.width), unsigned(grid.height), unsigned(grid.depth)};
  unsigned b[3] = {unsigned(block.width), unsigned(block.height), unsigned(block.depth)};
  std::memcpy(r.grid, g, sizeof(g));
  std::memcpy(r.block, b, sizeof(b));
  self->cb->commands.push_back(std::move(r));
}
void m_useResource(Encoder* self, SEL, id resource, NSUInteger usage) {
  Buffer* b = as<Buffer>(resource, "useResource:usage: resource");
  if (usage == 0 || usage > 3) violation("useResource:usage: with usage " + std::to_string(usage));
  if (b != nullptr) self->resources.push_back(b);
}
struct NSRange {
  NSUInteger location, length;
};
void m_executeCommands(Encoder* self, SEL, id icb, NSRange range) {
  ICB* i = as<ICB>(icb, "executeCommandsInBuffer:withRange: buffer");
  if (i == nullptr || self->ended) return;
  if (range.location != 0 || range.length > i->commands.size())
    return violation("executeCommandsInBuffer:withRange: range outside the ICB");
  retain(i);
  self->cb->executions.push_back({self->cb->commands.size(), {i, range.length, self->resources}});
}
void m_endEncoding(Encoder* self, SEL) {
  if (self->ended) violation("endEncoding twice");
  self->ended = true;
  self->cb->encoding = false;
}

// Runs one dispatch: false (and the command buffer's error set) where it cannot run. `resources`: for an ICB's
// command, the buffers the encoder declared with useResource: (others are out of the GPU's reach: a page fault).
bool run_one(CommandBuffer* cb, Recorded& r, const std::vector<Buffer*>* resources) {
  const HostKernel* k = r.pipeline->kernel;
  void* bufs[31] = {};
  for (int slot : k->buffer_slots) {
    Binding& b = r.bindings[slot];
    if (!b.set || b.buffer == nullptr) {
      violation(k->name + ": buffer slot " + std::to_string(slot) + " has no buffer bound");
      return false;
    }
    if (!st().live.count(b.buffer)) {
      cb->error = new_error("MTLCommandBufferErrorDomain", 9, "a buffer of the command buffer was released");
      return false;
    }
    if (resources != nullptr &&
        std::find(resources->begin(), resources->end(), b.buffer) == resources->end()) {
      violation(k->name + ": an ICB command's buffer was not declared with useResource:");
      cb->error = new_error("MTLCommandBufferErrorDomain", 3, "Caused GPU Address Fault Error");
      return false;
    }
    bufs[slot] = static_cast<char*>(b.buffer->memory) + b.offset;
  }
  for (int slot : k->bytes_slots) {  // a `constant T&`: bytes set on the encoder, or a buffer (an ICB's only way)
    Binding& b = r.bindings[slot];
    if (!b.set || (b.bytes.empty() && b.buffer == nullptr)) {
      violation(k->name + ": slot " + std::to_string(slot) + " has neither bytes nor a buffer set");
      return false;
    }
    bufs[slot] = b.buffer ? static_cast<char*>(b.buffer->memory) + b.offset : b.bytes.data();
  }
  st().dispatches.push_back({k->name, {r.grid[0], r.grid[1], r.grid[2]}, {r.block[0], r.block[1], r.block[2]},
                             reinterpret_cast<std::uint64_t>(cb)});
  if (!k->run(bufs, r.grid, r.block, k->fibers)) {
    cb->error = new_error("MTLCommandBufferErrorDomain", 2,
                          "Caused GPU Timeout Error (threads of " + k->name + " wait at a barrier forever)");
    return false;
  }
  return true;
}

// Runs a command buffer's dispatches and ICB executions in encoding order.
bool execute(CommandBuffer* cb) {
  size_t next = 0;
  auto run_icb = [&](const Execution& e) {
    for (size_t c = 0; c < e.count; ++c) {
      IndirectCommand* cmd = e.icb->commands[c];
      if (!cmd->encoded || cmd->cmd.pipeline == nullptr) {
        violation("an ICB command run before it was encoded");
        return false;
      }
      if (c > 0 && !cmd->barrier) violation("an ICB command without setBarrier may overlap the one before");
      if (!run_one(cb, cmd->cmd, &e.resources)) return false;
    }
    return true;
  };
  for (size_t i = 0; i < cb->commands.size(); ++i) {
    for (; next < cb->executions.size() && cb->executions[next].first == i; ++next)
      if (!run_icb(cb->executions[next].second)) return false;
    if (!run_one(cb, cb->commands[i], nullptr)) return false;
  }
  for (; next < cb->executions.size(); ++next)
    if (!run_icb(cb->executions[next].second)) return false;
  return true;
}

void m_commit(CommandBuffer* self, SEL) {
  FAKE_LOCK;  // command buffers of one queue run one at a time
  if (self->status != 0) return violation("commit of a command buffer committed before");
  if (self->encoding) violation("commit with an encoder still open (no endEncoding)");
  ++st().committed;
  auto t0 = std::chrono::steady_clock::now();
  long code;
  bool ok;
  if (take_failure("command_buffer", &code)) {
    self->error = new_error("MTLCommandBufferErrorDomain", code, "injected command buffer failure");
    ok = false;
  } else {
    ok = execute(self);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  self->start = st().clock + 1e-6;
  self->end = self->start + seconds;
  st().clock = self->end;
  self->status = ok ? 4 : 5;
}
void m_waitUntilCompleted(CommandBuffer* self, SEL) {
  if (self->status == 0) violation("waitUntilCompleted on an uncommitted command buffer (a real GPU waits forever)");
}
NSUInteger m_status(CommandBuffer* self, SEL) { return self->status; }
id m_error(CommandBuffer* self, SEL) { return self->error; }
double m_GPUStartTime(CommandBuffer* self, SEL) { return self->start; }
double m_GPUEndTime(CommandBuffer* self, SEL) { return self->end; }

id c_alloc(Class* cls, SEL) {
  if (cls->name == "MTLCompileOptions") return make<CompileOptions>("MTLCompileOptions");
  if (cls->name == "MTLComputePipelineDescriptor") return make<PipelineDescriptor>("MTLComputePipelineDescriptor");
  if (cls->name == "MTLIndirectCommandBufferDescriptor")
    return make<ICBDescriptor>("MTLIndirectCommandBufferDescriptor");
  violation("alloc of " + cls->name + ", which the fake cannot make");
  return nullptr;
}

long nil_handler() { return 0; }

template <class Fn>
void def(Class* c, const char* sel, Fn fn, bool class_method = false) {
  (class_method ? c->class_methods : c->methods)[intern(sel)] = reinterpret_cast<void*>(fn);
}

void register_classes() {
  State& s = st();
  auto cls = [&](const char* name) {
    auto c = std::make_unique<Class>();
    c->name = name;
    Class* p = c.get();
    s.class_ptrs.insert(p);
    s.classes[name] = std::move(c);
    def(p, "retain", m_retain);
    def(p, "release", m_release);
    def(p, "autorelease", m_autorelease);
    def(p, "retainCount", m_retainCount);
    def(p, "init", m_init);
    def(p, "alloc", c_alloc, true);
    return p;
  };
  Class* c = cls("NSString");
  def(c, "stringWithUTF8String:", c_stringWithUTF8String, true);
  def(c, "UTF8String", m_UTF8String);
  c = cls("NSError");
  def(c, "domain", m_domain);
  def(c, "code", m_code);
  def(c, "localizedDescription", m_localizedDescription);
  cls("OS_dispatch_data");
  c = cls("MTLCompileOptions");
  def(c, "setFastMathEnabled:", m_setFastMathEnabled);
  c = cls("MTLDevice");
  def(c, "name", m_name);
  def(c, "newCommandQueueWithMaxCommandBufferCount:", m_newCommandQueue);
  def(c, "maxThreadgroupMemoryLength", m_maxThreadgroupMemoryLength);
  def(c, "supportsFamily:", m_supportsFamily);
  def(c, "newBufferWithLength:options:", m_newBuffer);
  def(c, "newBufferWithBytesNoCopy:length:options:deallocator:", m_newBufferNoCopy);
  def(c, "newLibraryWithSource:options:error:", m_newLibraryWithSource);
  def(c, "newLibraryWithData:error:", m_newLibraryWithData);
  def(c, "newComputePipelineStateWithFunction:error:", m_newComputePipelineState);
  def(c, "newComputePipelineStateWithDescriptor:options:reflection:error:", m_newComputePipelineStateWithDescriptor);
  def(c, "newIndirectCommandBufferWithDescriptor:maxCommandCount:options:", m_newIndirectCommandBuffer);
  c = cls("MTLComputePipelineDescriptor");
  def(c, "setComputeFunction:", m_setComputeFunction);
  def(c, "setSupportIndirectCommandBuffers:", m_setSupportIndirectCommandBuffers);
  c = cls("MTLIndirectCommandBufferDescriptor");
  def(c, "setCommandTypes:", m_setCommandTypes);
  def(c, "setInheritBuffers:", m_setInheritBuffers);
  def(c, "setInheritPipelineState:", m_setInheritPipelineState);
  def(c, "setMaxKernelBufferBindCount:", m_setMaxKernelBufferBindCount);
  c = cls("MTLIndirectCommandBuffer");
  def(c, "indirectComputeCommandAtIndex:", m_indirectComputeCommandAtIndex);
  c = cls("MTLIndirectComputeCommand");
  def(c, "setComputePipelineState:", m_icmd_setPipeline);
  def(c, "setKernelBuffer:offset:atIndex:", m_icmd_setKernelBuffer);
  def(c, "concurrentDispatchThreadgroups:threadsPerThreadgroup:", m_icmd_dispatch);
  def(c, "setBarrier", m_icmd_setBarrier);
  c = cls("MTLLibrary");
  def(c, "newFunctionWithName:", m_newFunctionWithName);
  cls("MTLFunction");
  c = cls("MTLComputePipelineState");
  def(c, "maxTotalThreadsPerThreadgroup", m_maxTotalThreads);
  def(c, "threadExecutionWidth", m_threadExecutionWidth);
  c = cls("MTLBuffer");
  def(c, "contents", m_contents);
  def(c, "length", m_length);
  c = cls("MTLCommandQueue");
  def(c, "commandBuffer", m_commandBuffer);
  c = cls("MTLCommandBuffer");
  def(c, "computeCommandEncoder", m_computeCommandEncoder);
  def(c, "commit", m_commit);
  def(c, "waitUntilCompleted", m_waitUntilCompleted);
  def(c, "status", m_status);
  def(c, "error", m_error);
  def(c, "GPUStartTime", m_GPUStartTime);
  def(c, "GPUEndTime", m_GPUEndTime);
  c = cls("MTLComputeCommandEncoder");
  def(c, "setComputePipelineState:", m_setComputePipelineState);
  def(c, "setBuffer:offset:atIndex:", m_setBuffer);
  def(c, "setBytes:length:atIndex:", m_setBytes);
  def(c, "dispatchThreadgroups:threadsPerThreadgroup:", m_dispatch);
  def(c, "useResource:usage:", m_useResource);
  def(c, "executeCommandsInBuffer:withRange:", m_executeCommands);
  def(c, "endEncoding", m_endEncoding);
}

}  // namespace

// The handler for a message: the receiver's method, or one that returns nil after recording the violation.
extern "C" void* tg_fake_objc_lookup(id self, SEL sel) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  ++s.messages;
  std::string name = s.selectors.count(sel ? sel : "") ? sel : "<unregistered selector>";
  if (self == nullptr) {
    violation("message " + name + " to nil");
    return reinterpret_cast<void*>(nil_handler);
  }
  const std::unordered_map<SEL, void*>* table;
  std::string owner;
  if (s.class_ptrs.count(self)) {
    table = &static_cast<Class*>(self)->class_methods;
    owner = "class " + static_cast<Class*>(self)->name;
  } else if (s.live.count(static_cast<Obj*>(self))) {
    table = &static_cast<Obj*>(self)->cls->methods;
    owner = static_cast<Obj*>(self)->cls->name;
  } else {
    violation("message " + name + " to a freed or unknown object");
    return reinterpret_cast<void*>(nil_handler);
  }
  auto it = table->find(sel);
  if (it == table->end()) {
    violation(owner + " does not respond to " + name);
    return reinterpret_cast<void*>(nil_handler);
  }
  return it->second;
}

void install(const Config& cfg) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.classes.empty()) register_classes();
  s.cfg = cfg;
  s.installed = true;
  s.violations.clear();
  s.dispatches.clear();
  s.failures.clear();
  s.messages = s.committed = 0;
}

void uninstall() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  st().installed = false;
}

void fail_next(const std::string& what, long code, int count) {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  st().failures[what] = {code, count};
}

std::map<std::string, long> live_objects() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  std::map<std::string, long> out;
  for (Obj* o : st().live) ++out[o->cls->name];
  return out;
}

std::vector<std::string> violations() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return st().violations;
}

std::vector<Dispatch> dispatches() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return st().dispatches;
}

std::uint64_t messages() { return st().messages; }
std::uint64_t committed() { return st().committed; }

void clear_records() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  st().violations.clear();
  st().dispatches.clear();
  st().messages = st().committed = 0;
}

}  // namespace tg::metal::fake

using namespace tg::metal::fake;  // NOLINT: the exported C entry points below

TG_FAKE_EXPORT void* objc_getClass(const char* name) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  auto it = s.classes.find(name);
  return it == s.classes.end() ? nullptr : it->second.get();
}

TG_FAKE_EXPORT const char* sel_registerName(const char* name) {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return intern(name);
}

TG_FAKE_EXPORT void* objc_autoreleasePoolPush() {
  t_pools.emplace_back();
  return reinterpret_cast<void*>(t_pools.size());
}

TG_FAKE_EXPORT void objc_autoreleasePoolPop(void* token) {
  size_t depth = reinterpret_cast<size_t>(token);
  if (depth == 0 || depth != t_pools.size()) {
    violation("autorelease pools popped out of order (or on another thread)");
    if (depth == 0 || depth > t_pools.size()) return;
  }
  while (t_pools.size() >= depth) {
    std::vector<Obj*> objs = std::move(t_pools.back());
    t_pools.pop_back();
    for (Obj* o : objs) release(o);
  }
}

TG_FAKE_EXPORT void* MTLCreateSystemDefaultDevice() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (!s.installed) return nullptr;
  Device* d = make<Device>("MTLDevice");
  d->name = new_string("Fake Apple GPU (host)");
  return d;
}

TG_FAKE_EXPORT void* dispatch_data_create(const void* bytes, size_t size, void* queue, void* destructor) {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  if (queue != nullptr || destructor != nullptr) violation("dispatch_data_create: the fake copies (NULL destructor only)");
  DispatchData* d = make<DispatchData>("OS_dispatch_data");
  d->bytes.assign(static_cast<const char*>(bytes), size);
  return d;
}

// objc_msgSend: finds the handler for (receiver, selector) and jumps to it with every argument register and the
// stack as the caller left them, so the typed handler sees the arguments of the method's own prototype (structs
// passed on the stack included). x86-64 System V only.
#if defined(__x86_64__)
asm(R"(
  .pushsection .text
  .globl objc_msgSend
  .type objc_msgSend, @function
objc_msgSend:
  push %rbp
  mov %rsp, %rbp
  sub $192, %rsp
  mov %rdi, 0(%rsp)
  mov %rsi, 8(%rsp)
  mov %rdx, 16(%rsp)
  mov %rcx, 24(%rsp)
  mov %r8, 32(%rsp)
  mov %r9, 40(%rsp)
  mov %rax, 48(%rsp)
  movdqu %xmm0, 64(%rsp)
  movdqu %xmm1, 80(%rsp)
  movdqu %xmm2, 96(%rsp)
  movdqu %xmm3, 112(%rsp)
  movdqu %xmm4, 128(%rsp)
  movdqu %xmm5, 144(%rsp)
  movdqu %xmm6, 160(%rsp)
  movdqu %xmm7, 176(%rsp)
  call tg_fake_objc_lookup@PLT
  mov %rax, %r11
  mov 0(%rsp), %rdi
  mov 8(%rsp), %rsi
  mov 16(%rsp), %rdx
  mov 24(%rsp), %rcx
  mov 32(%rsp), %r8
  mov 40(%rsp), %r9
  mov 48(%rsp), %rax
  movdqu 64(%rsp), %xmm0
  movdqu 80(%rsp), %xmm1
  movdqu 96(%rsp), %xmm2
  movdqu 112(%rsp), %xmm3
  movdqu 128(%rsp), %xmm4
  movdqu 144(%rsp), %xmm5
  movdqu 160(%rsp), %xmm6
  movdqu 176(%rsp), %xmm7
  leave
  jmp *%r11
  .size objc_msgSend, .-objc_msgSend
  .popsection
)");
#endif
